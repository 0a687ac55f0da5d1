package statusapi

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestHealthEndpoints: the aggregate and single-check endpoints answer in the form of
// Kubernetes components, and readiness-only checks count for /readyz alone.
func TestHealthEndpoints(t *testing.T) {
	apiErr := errors.New("connection refused")
	var apiDown atomic.Bool
	mux := http.NewServeMux()
	healthHandlers(mux, []HealthCheck{
		{Name: "ping", Check: func() error { return nil }},
		{Name: "device-plugin", Check: func() error { return nil }},
		{Name: "apiserver", Ready: true, Check: func() error {
			if apiDown.Load() {
				return apiErr
			}
			return nil
		}},
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		apiDown    bool
		path       string
		wantStatus int
		wantBody   string
	}{
		{false, "/healthz", 200, "ok"},
		{false, "/readyz", 200, "ok"},
		{false, "/readyz?verbose", 200, "[+]ping ok\n[+]device-plugin ok\n[+]apiserver ok\nreadyz check passed\n"},
		{false, "/livez?verbose", 200, "[+]ping ok\n[+]device-plugin ok\nlivez check passed\n"},
		{false, "/readyz/apiserver", 200, "ok"},
		{true, "/readyz", 500, "[+]ping ok\n[+]device-plugin ok\n[-]apiserver failed: connection refused\nreadyz check failed\n"},
		{true, "/readyz?exclude=apiserver", 200, "ok"},
		{true, "/readyz/apiserver", 500, "internal server error: connection refused\n"},
		{true, "/healthz", 200, "ok"}, // readiness-only checks do not count for liveness
		{true, "/livez?verbose", 200, "[+]ping ok\n[+]device-plugin ok\nlivez check passed\n"},
		{true, "/livez/apiserver", 404, "404 page not found\n"},
	} {
		apiDown.Store(tc.apiDown)
		status, body := get(tc.path)
		if status != tc.wantStatus || body != tc.wantBody {
			t.Errorf("GET %s (apiserver down %v) = %d %q, want %d %q", tc.path, tc.apiDown, status, body, tc.wantStatus, tc.wantBody)
		}
	}
}
