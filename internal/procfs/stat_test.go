package procfs

import "testing"

func TestCPU(t *testing.T) {
	want := CPUSeconds{
		User: 1234.56, Nice: 1, System: 234.56, Idle: 98765.43,
		IOWait: 43.21, IRQ: 0, SoftIRQ: 7.89, Steal: 0.42,
	}
	for _, path := range fixtures {
		t.Run(path, func(t *testing.T) {
			got, err := newTestFS(t, path).CPU()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("CPU() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestCPUNoCPULine(t *testing.T) {
	root := writeTree(t, map[string]string{"stat": "ctxt 301598\nbtime 1795309561\n"})
	if _, err := newTestFS(t, root).CPU(); err == nil {
		t.Fatal("CPU() without a cpu line: want error")
	}
}
