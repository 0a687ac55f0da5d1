package statusapi

import (
	"fmt"
	"net/http"
	"strings"
)

// HealthCheck is one named check of the /healthz, /livez and /readyz endpoints.
type HealthCheck struct {
	// Name is the check's path element (/readyz/<name>) and its name in verbose output.
	Name string
	// Check returns nil when healthy. It must be safe for concurrent use and return quickly.
	Check func() error
	// Ready marks a readiness-only check: it counts for /readyz, not for /healthz and /livez,
	// so that a failing dependency (the API server) does not get the agent restarted.
	Ready bool
}

// healthHandlers serves /healthz and /livez (liveness checks) and /readyz (all checks), each
// with /<path>/<name> for one check, in the form of Kubernetes components: "ok" on success,
// "[+]name ok" / "[-]name failed: reason" lines under ?verbose or on failure, status 200 or
// 500. ?exclude=name (repeatable) leaves a check out.
func healthHandlers(mux *http.ServeMux, checks []HealthCheck) {
	var live []HealthCheck
	for _, c := range checks {
		if !c.Ready {
			live = append(live, c)
		}
	}
	for _, ep := range []struct {
		path   string
		checks []HealthCheck
	}{{"healthz", live}, {"livez", live}, {"readyz", checks}} {
		mux.Handle("/"+ep.path, aggregateHandler(ep.path, ep.checks))
		for _, c := range ep.checks {
			mux.Handle("/"+ep.path+"/"+c.Name, singleHandler(c))
		}
	}
}

func aggregateHandler(name string, checks []HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		excluded := map[string]bool{}
		for _, e := range r.URL.Query()["exclude"] {
			excluded[strings.TrimSpace(e)] = true
		}
		var out strings.Builder
		failed := false
		for _, c := range checks {
			if excluded[c.Name] {
				fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.Name)
				continue
			}
			if err := c.Check(); err != nil {
				failed = true
				fmt.Fprintf(&out, "[-]%s failed: %v\n", c.Name, err)
				continue
			}
			fmt.Fprintf(&out, "[+]%s ok\n", c.Name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "%s%s check failed\n", out.String(), name)
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprintf(w, "%s%s check passed\n", out.String(), name)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
}

func singleHandler(c HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if err := c.Check(); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "internal server error: %v\n", err)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
}
