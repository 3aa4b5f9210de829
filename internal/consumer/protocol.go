package consumer

// The consumer protocol, both sides of it: the run (internal/runner)
// starts a consumer process (loadgen consume, ProcessMain) with these
// files and writes these control bytes; the consumer writes these
// messages.
//
//	stdin  the control pipe: ControlGo, then ControlLock / ControlUnlock
//	fd 3   the message pipe: Message records, MessageSize bytes each
//	fd 4   the run (sub-)cgroup's cgroup.procs, to join through (--join)
//	fd 5   the run's cycle board, shared memory (--cycle-log)
//
// A consumer also exits when its control pipe closes: the master is gone.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// The file descriptors a consumer is started with, beyond stdin.
const (
	MessageFD = 3
	JoinFD    = 4
	BoardFD   = 5
	// UnifiedJoinFD is the cgroup.procs of the consumer's group in the
	// unified hierarchy, where memory is on cgroup v1 (--join-unified).
	UnifiedJoinFD = 6
)

// ExtraFiles places a consumer's files at their descriptors, for
// exec.Cmd.ExtraFiles (whose first entry is fd 3); board may be nil.
func ExtraFiles(message, join, board, unified *os.File) []*os.File {
	files := []*os.File{MessageFD - 3: message, JoinFD - 3: join}
	if board != nil || unified != nil {
		files = append(files, board) // BoardFD, closed in the child when nil
	}
	if unified != nil {
		files = append(files, unified) // UnifiedJoinFD
	}
	return files
}

// Control bytes the master writes on a consumer's control pipe (stdin).
const (
	// ControlGo lets the consumer start.
	ControlGo = 'g'
	// ControlLock asks the consumer to lock its region (a policy's
	// protection): pages resident now stay, and pages it faults in later
	// are locked as they come (mlock2 MLOCK_ONFAULT), so reclaim takes
	// from the other consumers instead.
	ControlLock = 'L'
	// ControlUnlock ends the protection (munlock).
	ControlUnlock = 'U'
)

// MessageKind says what a consumer message means.
type MessageKind uint32

// Message kinds. Zero is left out so that a zeroed record is caught.
const (
	// KindStarted: A = unix ns when allocation began, B = unix ns when the
	// fill finished; B is 0 in fill mode or when SIGTERM abandoned the fill.
	KindStarted MessageKind = iota + 1
	// KindCycle: A = writes done in the cycle (fewer than W only when
	// SIGTERM cut it short), B = the cycle's duration in ns (writes only).
	KindCycle
	// KindDone: A = unix ns when it finished, before freeing; B = cycles
	// (fill mode: chunks) done; FlagTerminated when SIGTERM stopped it.
	KindDone
	// KindChunk: A = repeat<<32 | chunk index, B = the chunk's fill in ns.
	KindChunk
	// KindError: a fatal error, followed by exit status 1; A = the errno
	// when there is one. The message goes to stderr.
	KindError
	// KindRegion: the region is mapped; A = its address, B = its length.
	// The master pages it out (process_madvise) when a policy stops the
	// consumer.
	KindRegion
	// KindLocked answers a lock or unlock request on the control pipe: A =
	// 1 when the region is now locked, 0 when unlocked; B = the errno that
	// refused the request, 0 when done.
	KindLocked
)

// FlagTerminated marks a Done message of a consumer stopped by SIGTERM.
const FlagTerminated uint32 = 1

// MessageSize is the size of one encoded message: kind, flags, A, B, little
// endian. It is below PIPE_BUF, so each write to the pipe is atomic.
const MessageSize = 24

var kindNames = [...]string{KindStarted: "started", KindCycle: "cycle", KindDone: "done", KindChunk: "chunk", KindError: "error", KindRegion: "region", KindLocked: "locked"}

func (k MessageKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// Message is one record a consumer writes to its message pipe (MessageFD).
type Message struct {
	Kind  MessageKind
	Flags uint32
	A, B  int64
}

// StartedMessage is the Started record; filled is zero when there was no fill.
func StartedMessage(began, filled time.Time) Message {
	r := Message{Kind: KindStarted, A: began.UnixNano()}
	if !filled.IsZero() {
		r.B = filled.UnixNano()
	}
	return r
}

// CycleMessage is the Cycle record.
func CycleMessage(writes int, d time.Duration) Message {
	return Message{Kind: KindCycle, A: int64(writes), B: int64(d)}
}

// DoneMessage is the Done record.
func DoneMessage(at time.Time, cycles int64, terminated bool) Message {
	r := Message{Kind: KindDone, A: at.UnixNano(), B: cycles}
	if terminated {
		r.Flags |= FlagTerminated
	}
	return r
}

// ChunkMessage is the Chunk record of fill mode.
func ChunkMessage(repeat, chunk int, d time.Duration) Message {
	return Message{Kind: KindChunk, A: int64(repeat)<<32 | int64(uint32(chunk)), B: int64(d)}
}

// TimeA is A as a unix-ns time (Started, Done).
func (r Message) TimeA() time.Time { return time.Unix(0, r.A) }

// TimeB is B as a unix-ns time, zero when B is 0 (Started).
func (r Message) TimeB() time.Time {
	if r.B == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.B)
}

// Duration is B as a duration (Cycle, Chunk).
func (r Message) Duration() time.Duration { return time.Duration(r.B) }

// Chunk splits a Chunk record's A into repeat and chunk index.
func (r Message) Chunk() (repeat, chunk int) { return int(r.A >> 32), int(uint32(r.A)) }

// Terminated reports whether a Done record came from SIGTERM.
func (r Message) Terminated() bool { return r.Flags&FlagTerminated != 0 }

func (r Message) String() string {
	return fmt.Sprintf("%s{flags=%d a=%d b=%d}", r.Kind, r.Flags, r.A, r.B)
}

// AppendBinary appends the 24-byte encoding.
func (r Message) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Kind))
	b = binary.LittleEndian.AppendUint32(b, r.Flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.A))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.B))
	return b, nil
}

// Encode writes the record in one write.
func (r Message) Encode(w io.Writer) error {
	var buf [MessageSize]byte
	b, _ := r.AppendBinary(buf[:0])
	_, err := w.Write(b)
	return err
}

// UnmarshalBinary decodes exactly one record and checks its kind.
func (r *Message) UnmarshalBinary(b []byte) error {
	if len(b) != MessageSize {
		return fmt.Errorf("consumer message: %d bytes, want %d", len(b), MessageSize)
	}
	k := MessageKind(binary.LittleEndian.Uint32(b))
	if k < KindStarted || k > KindLocked {
		return fmt.Errorf("consumer message: unknown kind %d: the stream is corrupt or from another loadgen version", uint32(k))
	}
	*r = Message{
		Kind:  k,
		Flags: binary.LittleEndian.Uint32(b[4:]),
		A:     int64(binary.LittleEndian.Uint64(b[8:])),
		B:     int64(binary.LittleEndian.Uint64(b[16:])),
	}
	return nil
}

// ErrTruncatedMessage is a message stream that ends inside a record.
var ErrTruncatedMessage = errors.New("consumer message stream ends inside a record")

// ReadMessage reads one record. It returns io.EOF at a clean end of the
// stream and an error wrapping ErrTruncatedMessage inside a record.
func ReadMessage(r io.Reader) (Message, error) {
	var buf [MessageSize]byte
	n, err := io.ReadFull(r, buf[:])
	switch {
	case err == io.EOF:
		return Message{}, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Message{}, fmt.Errorf("%w: got %d of %d bytes", ErrTruncatedMessage, n, MessageSize)
	case err != nil:
		return Message{}, fmt.Errorf("reading consumer message: %w", err)
	}
	var rep Message
	return rep, rep.UnmarshalBinary(buf[:])
}
