package conformance

import (
	"strings"
	"sync"
	"time"
)

// tailBytes is how much of the plugin's stderr the suite keeps.
const tailBytes = 16 << 10

// stderrLine is one line of the plugin's stderr and when the suite read it.
type stderrLine struct {
	at   time.Time
	text string
}

// tailBuffer keeps the last tailBytes bytes written to it as lines, each with the time it
// was read, so that a process's lines can be told from those of the process before it: every
// process of the plugin's tree writes to the same pipe, and a line is attributed to the
// process that ran when it arrived. It is safe for concurrent use.
type tailBuffer struct {
	mu      sync.Mutex
	partial string // the unterminated end of the last write
	partAt  time.Time
	kept    []stderrLine
	size    int
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	text := t.partial + string(b)
	if t.partial == "" {
		t.partAt = now
	}
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			break
		}
		t.appendLocked(stderrLine{at: t.partAt, text: text[:i]})
		text, t.partAt = text[i+1:], now
	}
	if len(text) > tailBytes {
		text = text[len(text)-tailBytes:]
	}
	t.partial = text
	return len(b), nil
}

func (t *tailBuffer) appendLocked(l stderrLine) {
	if len(l.text) > tailBytes {
		l.text = l.text[len(l.text)-tailBytes:]
	}
	t.kept = append(t.kept, l)
	t.size += len(l.text) + 1
	drop := 0
	for t.size > tailBytes && drop < len(t.kept)-1 {
		t.size -= len(t.kept[drop].text) + 1
		drop++
	}
	if drop > 0 {
		t.kept = append(t.kept[:0], t.kept[drop:]...)
	}
}

// lines returns up to n lines that tell why a process ended: from the last line that starts
// a Go panic or fatal error, if the tail holds one, else the last n non-blank lines. Nil
// when nothing was written.
func (t *tailBuffer) lines(n int) []string {
	return t.between(time.Time{}, time.Time{}, n)
}

// between is lines restricted to what arrived at or after from and, unless to is zero,
// before to: the lines of a process that ran from from to to.
func (t *tailBuffer) between(from, to time.Time, n int) []string {
	t.mu.Lock()
	all := make([]stderrLine, 0, len(t.kept)+1)
	all = append(all, t.kept...)
	if t.partial != "" {
		all = append(all, stderrLine{at: t.partAt, text: t.partial})
	}
	t.mu.Unlock()
	var text []string
	for _, l := range all {
		if l.at.Before(from) || (!to.IsZero() && !l.at.Before(to)) {
			continue
		}
		if s := strings.TrimRight(l.text, " \t\r"); s != "" {
			text = append(text, s)
		}
	}
	for i := len(text) - 1; i >= 0; i-- {
		if strings.HasPrefix(text[i], "panic: ") || strings.HasPrefix(text[i], "fatal error: ") {
			return text[i:min(len(text), i+n)]
		}
	}
	return text[max(0, len(text)-n):]
}
