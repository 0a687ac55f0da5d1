package devicemanager

import (
	"sync"
	"time"
)

// Defaults of logLimiter.
const (
	// logRepeatInterval is how long a log line's cause stays quiet after it was logged.
	logRepeatInterval = 10 * time.Second
	// logLimiterKeys bounds how many causes are remembered. Past it (after forgetting causes
	// quiet for a whole interval), new causes share one overflow cause, so that a flood of
	// distinct causes is limited too and the memory stays bounded.
	logLimiterKeys = 256
)

// logLimiter decides which log lines a repeated cause may still write: the first line of a
// cause passes, then at most one per interval, which reports how many were suppressed since
// the previous one. A cause is a caller-chosen key (for example resource, endpoint and error
// text). The caller passes the time, so tests are deterministic. The zero value is ready to
// use with the defaults above. It is safe for concurrent use.
type logLimiter struct {
	interval time.Duration // zero: logRepeatInterval
	maxKeys  int           // zero: logLimiterKeys

	mu        sync.Mutex
	causes    map[string]*logCause
	overflow  logCause // shared by new causes while causes holds maxKeys
	lastPrune time.Time
}

// logCause is one cause's state: when a line last passed and how many were held back since.
type logCause struct {
	last       time.Time
	suppressed int
}

// allow reports whether a line for key may be logged at now and, if so, how many lines of the
// same cause were suppressed since the last one that passed. While the limiter is full, a new
// key counts against the shared overflow cause, and the count is of the lines it held back.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	interval, maxKeys := l.interval, l.maxKeys
	if interval <= 0 {
		interval = logRepeatInterval
	}
	if maxKeys <= 0 {
		maxKeys = logLimiterKeys
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.causes == nil {
		l.causes = map[string]*logCause{}
	}
	c, known := l.causes[key]
	if !known && len(l.causes) >= maxKeys {
		l.pruneLocked(now, interval)
		if len(l.causes) >= maxKeys {
			return l.overflow.pass(now, interval)
		}
	}
	if !known {
		l.causes[key] = &logCause{last: now}
		return true, 0
	}
	return c.pass(now, interval)
}

// pass counts one line of the cause at now: it passes if none did within interval, reporting
// how many were suppressed since the last one that did.
func (c *logCause) pass(now time.Time, interval time.Duration) (ok bool, suppressed int) {
	if !c.last.IsZero() && now.Sub(c.last) < interval {
		c.suppressed++
		return false, 0
	}
	suppressed = c.suppressed
	c.last, c.suppressed = now, 0
	return true, suppressed
}

// pruneLocked forgets the causes that have not passed a line for a whole interval (dropping
// their suppressed counts), at most once per interval so that a full limiter stays cheap.
func (l *logLimiter) pruneLocked(now time.Time, interval time.Duration) {
	if !l.lastPrune.IsZero() && now.Sub(l.lastPrune) < interval {
		return
	}
	l.lastPrune = now
	for k, c := range l.causes {
		if now.Sub(c.last) >= interval {
			delete(l.causes, k)
		}
	}
}
