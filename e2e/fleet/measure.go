package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Counts are request counts keyed by "VERB resource" (resource with /subresource).
type Counts map[string]float64

// Total sums the counts.
func (c Counts) Total() float64 {
	t := 0.0
	for _, v := range c {
		t += v
	}
	return t
}

// Keys are the keys, sorted.
func (c Counts) Keys() []string {
	var ks []string
	for k := range c {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// minus returns c - o, key by key.
func (c Counts) minus(o Counts) Counts {
	out := Counts{}
	for k, v := range c {
		if d := v - o[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// apiMetrics is one scrape of the apiserver's /metrics: apiserver_request_total by verb and
// resource, and the long-running WATCH requests open now.
type apiMetrics struct {
	requests Counts
	watches  float64
}

// scrape reads the apiserver's /metrics with the admin identity.
func (f *Fleet) scrape(ctx context.Context) (apiMetrics, error) {
	raw, err := f.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiMetrics{}, fmt.Errorf("scraping the apiserver's /metrics: %w", err)
	}
	return parseMetrics(raw), nil
}

// parseMetrics picks apiserver_request_total and apiserver_longrunning_requests{verb="WATCH"}
// out of the Prometheus text format.
func parseMetrics(raw []byte) apiMetrics {
	m := apiMetrics{requests: Counts{}}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "apiserver_request_total" && name != "apiserver_longrunning_requests") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		l := parseLabels(labels)
		if name == "apiserver_longrunning_requests" {
			if l["verb"] == "WATCH" {
				m.watches += v
			}
			continue
		}
		m.requests[requestKey(l["verb"], l["resource"], l["subresource"])] += v
	}
	return m
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

func requestKey(verb, resource, sub string) string {
	if resource == "" {
		return strings.ToUpper(verb) + " (non-resource)"
	}
	if sub != "" {
		resource += "/" + sub
	}
	return strings.ToUpper(verb) + " " + resource
}

// auditEvent is what the fleet reads of an audit event.
type auditEvent struct {
	Stage string    `json:"stage"`
	Time  time.Time `json:"stageTimestamp"`
	Verb  string    `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// auditCounts reads the audit log from offset and returns the requests by user (a request
// counts once: at ResponseComplete, a watch at ResponseStarted), the watches by user that
// started and did not end since offset, and the new offset.
func auditCounts(path string, offset int64) (requests, watches map[string]Counts, next int64, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, offset, err
	}
	defer func() { _ = fh.Close() }()
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return nil, nil, offset, err
	}
	out, open := map[string]Counts{}, map[string]Counts{}
	r := bufio.NewReaderSize(fh, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			// A partly written last line is read next time.
			return out, open, offset, nil
		}
		offset += int64(len(line))
		var ev auditEvent
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		res, sub := "", ""
		if ev.ObjectRef != nil {
			res, sub = ev.ObjectRef.Resource, ev.ObjectRef.Subresource
		}
		watch := ev.Verb == "watch"
		if watch {
			if open[ev.User.Username] == nil {
				open[ev.User.Username] = Counts{}
			}
			switch ev.Stage {
			case "ResponseStarted":
				open[ev.User.Username][requestKey(ev.Verb, res, sub)]++
			case "ResponseComplete":
				open[ev.User.Username][requestKey(ev.Verb, res, sub)]--
			}
		}
		if (watch && ev.Stage != "ResponseStarted") || (!watch && ev.Stage != "ResponseComplete") {
			continue
		}
		if out[ev.User.Username] == nil {
			out[ev.User.Username] = Counts{}
		}
		out[ev.User.Username][requestKey(ev.Verb, res, sub)]++
	}
}

// procStat is a process's CPU time so far (user + system, seconds), resident memory and the
// part of it no other process shares (bytes: what one more such process costs), from /proc.
type procStat struct {
	cpu     float64
	rss     float64
	private float64
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux ABI Go runs on.
const clockTicks = 100

func readProc(pid int) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces: fields count from after it.
	_, after, ok := bytes.Cut(raw, []byte(") "))
	if !ok {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(after))
	if len(fields) < 22 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	// Fields 14 and 15 of stat (utime, stime) are 11 and 12 here; 24 (rss, pages) is 21.
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	pages, _ := strconv.ParseFloat(fields[21], 64)
	private, err := privateBytes(pid)
	if err != nil {
		return procStat{}, err
	}
	return procStat{cpu: (utime + stime) / clockTicks, rss: pages * float64(os.Getpagesize()), private: private}, nil
}

// privateBytes sums Private_Clean and Private_Dirty of /proc/<pid>/smaps_rollup: the resident
// pages only this process maps (the binary's text, shared by every kdm, is not among them).
func privateBytes(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "Private_Clean:" || f[0] == "Private_Dirty:") && f[2] == "kB" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/smaps_rollup: %q: %w", pid, line, err)
			}
			total += kb * 1024
		}
	}
	return total, nil
}

// LoadAverage is the machine's load averages (1, 5, 15 minutes), as /proc/loadavg has them.
func LoadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// nodeRequestRate buckets the requests the nodes made (their own identities, as auditCounts
// counts them) by second since t0, from the whole audit log.
func nodeRequestRate(path string, t0, end time.Time) ([]point, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	buckets := make([]float64, int(end.Sub(t0).Seconds())+1)
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var ev auditEvent
		if json.Unmarshal(line, &ev) != nil || !strings.HasPrefix(ev.User.Username, "system:node:") {
			continue
		}
		watch := ev.Verb == "watch"
		if (watch && ev.Stage != "ResponseStarted") || (!watch && ev.Stage != "ResponseComplete") {
			continue
		}
		if i := int(ev.Time.Sub(t0).Seconds()); i >= 0 && i < len(buckets) {
			buckets[i]++
		}
	}
	out := make([]point, len(buckets))
	for i, v := range buckets {
		out[i] = point{at: time.Duration(i) * time.Second, v: v}
	}
	return out, nil
}
