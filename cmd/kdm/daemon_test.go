package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runAsync runs runUntilSignalled in the background and returns its exit code channel.
func runAsync(run func(context.Context) error, sigs chan os.Signal, timeout time.Duration, stderr *bytes.Buffer) <-chan int {
	code := make(chan int, 1)
	go func() { code <- runUntilSignalled(run, sigs, timeout, stderr) }()
	return code
}

// waitCode waits, bounded, for runUntilSignalled's exit code.
func waitCode(t *testing.T, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("runUntilSignalled did not return within 10s")
		return -1
	}
}

func TestRunUntilSignalledCleanStop(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	var stderr bytes.Buffer
	started := make(chan struct{})
	code := runAsync(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return nil
	}, sigs, time.Minute, &stderr)
	<-started
	sigs <- syscall.SIGTERM
	if c := waitCode(t, code); c != 0 {
		t.Errorf("exit code after a clean stop = %d, want 0; stderr:\n%s", c, stderr.String())
	}
}

func TestRunUntilSignalledRunFails(t *testing.T) {
	var stderr bytes.Buffer
	code := runAsync(func(context.Context) error { return errors.New("socket in use") }, make(chan os.Signal), time.Minute, &stderr)
	if c := waitCode(t, code); c != 1 {
		t.Errorf("exit code = %d, want 1", c)
	}
	if !strings.Contains(stderr.String(), "socket in use") {
		t.Errorf("stderr does not name the failure: %q", stderr.String())
	}
}

// stuckInShutdown stands for a component that ignores its context; its name must appear in
// the goroutine dump written when the shutdown timeout expires.
func stuckInShutdown(release <-chan struct{}) error {
	<-release
	return nil
}

func TestRunUntilSignalledTimeout(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	var stderr bytes.Buffer
	code := runAsync(func(context.Context) error {
		close(started)
		return stuckInShutdown(release)
	}, sigs, 100*time.Millisecond, &stderr)
	<-started
	sigs <- syscall.SIGTERM
	if c := waitCode(t, code); c != 1 {
		t.Errorf("exit code after the shutdown timeout = %d, want 1", c)
	}
	if !strings.Contains(stderr.String(), "stuckInShutdown") {
		t.Errorf("the goroutine dump does not name the stuck function; stderr:\n%s", stderr.String())
	}
}

func TestRunUntilSignalledSecondSignal(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	var stderr bytes.Buffer
	code := runAsync(func(context.Context) error {
		close(started)
		return stuckInShutdown(release)
	}, sigs, 0, &stderr) // no bound: only the second signal can end it
	<-started
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGINT
	if c := waitCode(t, code); c != 1 {
		t.Errorf("exit code after a second signal = %d, want 1", c)
	}
}
