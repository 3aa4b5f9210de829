package consumer

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestMessageRoundTrip(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 123_456_789)
	reports := []Message{
		StartedMessage(t0, t0.Add(40*time.Millisecond)),
		StartedMessage(t0, time.Time{}),
		CycleMessage(10_000, 3*time.Millisecond),
		ChunkMessage(4, 11, 2*time.Second),
		DoneMessage(t0.Add(time.Minute), 583, true),
		DoneMessage(t0.Add(time.Minute), 600, false),
		{Kind: KindError, A: 12},
	}
	var buf bytes.Buffer
	for _, r := range reports {
		if err := r.Encode(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() != len(reports)*MessageSize {
		t.Fatalf("encoded %d bytes, want %d", buf.Len(), len(reports)*MessageSize)
	}
	for i, want := range reports {
		got, err := ReadMessage(&buf)
		if err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		if got != want {
			t.Errorf("report %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := ReadMessage(&buf); err != io.EOF {
		t.Fatalf("at the end: got %v, want io.EOF itself", err)
	}

	if got := reports[0].TimeA(); !got.Equal(t0) {
		t.Errorf("TimeA = %v, want %v", got, t0)
	}
	if got := reports[1].TimeB(); !got.IsZero() {
		t.Errorf("TimeB of an unfilled Started = %v, want zero", got)
	}
	if r, c := reports[3].Chunk(); r != 4 || c != 11 {
		t.Errorf("Chunk() = %d, %d; want 4, 11", r, c)
	}
	if reports[3].Duration() != 2*time.Second || !reports[4].Terminated() || reports[5].Terminated() {
		t.Errorf("accessors: %v %v %v", reports[3].Duration(), reports[4].Terminated(), reports[5].Terminated())
	}
}

// The layout is a contract between two processes; pin it byte for byte.
func TestMessageLayout(t *testing.T) {
	b, _ := Message{Kind: KindDone, Flags: FlagTerminated, A: 0x0102030405060708, B: -2}.AppendBinary(nil)
	const want = "03000000" + "01000000" + "0807060504030201" + "feffffffffffffff"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
}

func TestReadMessageTruncated(t *testing.T) {
	var buf bytes.Buffer
	_ = CycleMessage(1000, time.Millisecond).Encode(&buf)
	_ = CycleMessage(1000, time.Millisecond).Encode(&buf)
	buf.Truncate(MessageSize + 10)
	if _, err := ReadMessage(&buf); err != nil {
		t.Fatalf("first report: %v", err)
	}
	_, err := ReadMessage(&buf)
	if !errors.Is(err, ErrTruncatedMessage) || !strings.Contains(err.Error(), "10 of 24 bytes") {
		t.Fatalf("got %v, want ErrTruncatedMessage saying 10 of 24 bytes", err)
	}
}

func TestReadMessageUnknownKind(t *testing.T) {
	for _, kind := range []uint32{0, uint32(KindLocked) + 1, 0xffffffff} {
		b, _ := Message{Kind: MessageKind(kind)}.AppendBinary(nil)
		if _, err := ReadMessage(bytes.NewReader(b)); err == nil || !strings.Contains(err.Error(), "unknown kind") {
			t.Errorf("kind %d: got %v, want an unknown kind error", kind, err)
		}
	}
}
