package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kdm-project/kdm/deviceplugin"
	"github.com/kdm-project/kdm/deviceplugin/plugintest"
)

// TestPluginSocketPath: the endpoint is resolved through symlinks and must stay inside the
// (resolved) plugin directory.
func TestPluginSocketPath(t *testing.T) {
	base := shortDir(t)
	realBase := filepath.Join(base, "real")
	dir := filepath.Join(realBase, "dp")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(dir, "sub"), outside} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(dir, "gpu.sock"), filepath.Join(dir, "gpu-plugin"), filepath.Join(dir, "sub", "x.sock"), filepath.Join(outside, "x.sock")} {
		listenUnix(t, p)
	}
	linkedBase := filepath.Join(base, "linked") // a symlinked /var/lib/kubelet
	symlinks := map[string]string{
		linkedBase:                             realBase,
		filepath.Join(dir, "out.sock"):         filepath.Join(outside, "x.sock"),
		filepath.Join(dir, "outdir"):           outside,
		filepath.Join(dir, "alias.sock"):       "gpu.sock", // relative, inside
		filepath.Join(dir, "subalias"):         filepath.Join(dir, "sub"),
		filepath.Join(dir, "chain.sock"):       "out.sock", // inside link to an outside link
		filepath.Join(dir, "dangling.sock"):    filepath.Join(base, "nothing.sock"),
		filepath.Join(dir, "sub", "up.sock"):   "../gpu.sock",
		filepath.Join(dir, "dirlink.sock"):     dir, // resolves to the directory itself
		filepath.Join(dir, "sub", "loop.sock"): "loop.sock",
	}
	for link, target := range symlinks {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	linkedDir := filepath.Join(linkedBase, "dp")
	cases := []struct {
		dir, endpoint string
		want          string // resolved path, when wantErr is empty
		wantErr       string
	}{
		{dir, "gpu.sock", filepath.Join(dir, "gpu.sock"), ""},
		{dir, "gpu-plugin", filepath.Join(dir, "gpu-plugin"), ""}, // no .sock suffix
		{dir, "sub/x.sock", filepath.Join(dir, "sub", "x.sock"), ""},
		{dir, "missing.sock", filepath.Join(dir, "missing.sock"), ""}, // dialled, fails like the kubelet
		{dir, "alias.sock", filepath.Join(dir, "gpu.sock"), ""},
		{dir, "subalias/x.sock", filepath.Join(dir, "sub", "x.sock"), ""},
		{dir, "sub/up.sock", filepath.Join(dir, "gpu.sock"), ""},
		{dir, "sub/../gpu.sock", filepath.Join(dir, "gpu.sock"), ""},
		{linkedDir, "gpu.sock", filepath.Join(dir, "gpu.sock"), ""},
		{linkedDir, "sub/x.sock", filepath.Join(dir, "sub", "x.sock"), ""},
		{dir, "../outside/x.sock", "", `invalid endpoint "../outside/x.sock": must name a socket inside`},
		{dir, filepath.Join(outside, "x.sock"), "", "must name a socket inside"},
		{dir, "", "", `invalid endpoint ""`},
		{dir, "out.sock", "", `invalid endpoint "out.sock": it resolves to ` + filepath.Join(outside, "x.sock") + ", outside the device plugin directory " + dir},
		{linkedDir, "out.sock", "", "outside the device plugin directory " + linkedDir},
		{dir, "outdir/x.sock", "", `invalid endpoint "outdir/x.sock": it resolves to ` + filepath.Join(outside, "x.sock")},
		{dir, "chain.sock", "", "outside the device plugin directory"},
		{dir, "dirlink.sock", "", "outside the device plugin directory"},
		{dir, "dangling.sock", "", `invalid endpoint "dangling.sock" in ` + dir},
		{dir, "sub/loop.sock", "", `invalid endpoint "sub/loop.sock"`},
		{dir, "nodir/x.sock", "", `invalid endpoint "nodir/x.sock" in ` + dir},
		{filepath.Join(base, "absent"), "x.sock", "", "resolving device plugin directory"},
	}
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.dir, base)+":"+tc.endpoint, func(t *testing.T) {
			got, err := pluginSocketPath(tc.dir, tc.endpoint)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("pluginSocketPath: %v, want %s", err, tc.want)
			case tc.wantErr == "" && got != tc.want:
				t.Fatalf("pluginSocketPath = %s, want %s", got, tc.want)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("pluginSocketPath = %q, %v; want an error containing %q", got, err, tc.wantErr)
			}
		})
	}
}

func register(c pluginapi.RegistrationClient, resource, endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := c.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: resource, Endpoint: endpoint})
	return err
}

// unregisteredPlugin serves resource on dir/socket without registering it; it stops at cleanup.
func unregisteredPlugin(t *testing.T, dir, resource, socket string) *plugintest.Plugin {
	t.Helper()
	return testPlugin(t, dir, resource, socket, &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "d0"),
		func(c *deviceplugin.Config) { c.Registration = deviceplugin.NoRegistration })
}

// TestSocketOwnership: one live socket serves one resource. Another resource is refused with
// an error naming both and the socket, also through a symlinked alias and through the
// plugins_registry path; the same resource may re-register, and once the owner's stream has
// ended the socket is free for another resource.
func TestSocketOwnership(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	client := registrationClient(t, m.SocketPath())
	p := testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a", "b"))
	waitFor(t, m, "gpu devices", func() bool { return capacityIs(m, gpu, 2, 2) })
	if err := os.Symlink("gpu.sock", filepath.Join(dir, "alias.sock")); err != nil {
		t.Fatal(err)
	}

	const other = "example.com/other"
	for _, ep := range []string{"gpu.sock", "alias.sock", "./gpu.sock"} {
		err := register(client, other, ep)
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("Register %s on %s: got %v, want AlreadyExists", other, ep, err)
		}
		for _, want := range []string{other, gpu, p.SocketPath()} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not name %q", err, want)
			}
		}
	}
	// The plugins_registry path gets the same check.
	_, err := m.registerWatchedPlugin(context.Background(), filepath.Join(dir, "reg.sock"), &registerapi.PluginInfo{
		Type: registerapi.DevicePlugin, Name: other, Endpoint: filepath.Join(dir, "alias.sock"), SupportedVersions: []string{pluginapi.Version}})
	if !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("plugin watcher registration of %s on gpu.sock's alias: got %v, want ErrSocketInUse", other, err)
	}
	if calls := p.Calls(); calls.Options != 1 {
		t.Errorf("the refused registrations dialled the plugin: %d GetDevicePluginOptions calls, want 1", calls.Options)
	}
	if c, a, _ := m.GetCapacity(); quantity(c, other) != -1 || quantity(a, other) != -1 {
		t.Fatalf("refused resource has capacity %v allocatable %v", c, a)
	}

	// The owner may re-register on its socket (a plugin restart), through the alias too.
	for _, ep := range []string{"gpu.sock", "alias.sock"} {
		if err := register(client, gpu, ep); err != nil {
			t.Fatalf("re-registration of %s on %s: %v", gpu, ep, err)
		}
	}
	waitFor(t, m, "gpu devices after re-registration", func() bool { return capacityIs(m, gpu, 2, 2) })

	// The plugin goes away: its socket may now serve another resource.
	p.Stop()
	waitFor(t, m, "gpu disconnected", func() bool { return capacityIs(m, gpu, 2, 0) })
	testPlugin(t, dir, other, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "x"))
	waitFor(t, m, "the new resource on the old socket", func() bool { return capacityIs(m, other, 1, 1) })
}

// TestSocketOwnershipWatcherEndpoint: a socket registered through plugins_registry is owned
// like one registered through kubelet.sock.
func TestSocketOwnershipWatcherEndpoint(t *testing.T) {
	dir := shortDir(t)
	watch := filepath.Join(dir, "plugins_registry")
	m := testManager(t, dir, Config{PluginWatcherDir: watch}, Sources{})
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a"),
		func(c *deviceplugin.Config) { c.Registration, c.WatcherDir = deviceplugin.PluginWatcher, watch })
	waitFor(t, m, "watcher plugin", func() bool { return capacityIs(m, gpu, 1, 1) })
	err := register(registrationClient(t, m.SocketPath()), "example.com/other", "gpu.sock")
	if !errors.Is(err, ErrSocketInUse) && status.Code(err) != codes.AlreadyExists {
		t.Fatalf("Register on the watcher plugin's socket: got %v, want AlreadyExists", err)
	}
}

// TestSocketOwnershipRace: resources racing for one socket: exactly one wins.
func TestSocketOwnershipRace(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	client := registrationClient(t, m.SocketPath())
	p := unregisteredPlugin(t, dir, gpu, "shared.sock")
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = register(client, fmt.Sprintf("example.com/r%d", i), "shared.sock")
		}()
	}
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
		case status.Code(err) != codes.AlreadyExists:
			t.Errorf("racer %d: %v, want success or AlreadyExists", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d resources registered on one socket, want exactly 1 (errors %v)", winners, errs)
	}
	m.mu.Lock()
	live := 0
	for _, info := range m.endpoints {
		if info.ep != nil && info.ep.SocketPath() == p.SocketPath() && !info.ep.IsStopped() {
			live++
		}
	}
	m.mu.Unlock()
	if live != 1 {
		t.Fatalf("%d live endpoints on the socket, want 1", live)
	}
}

// TestRegisterInFlightLimit: a third Register for one resource and endpoint while two are in
// flight is served, and the oldest of the two fails at once with ResourceExhausted naming the
// resource; another resource is not held up; once the calls end, the resource registers.
// (Before, the third call itself was refused, so that a flood of silent sockets locked a live
// plugin out for the whole dial timeout; TestRegisterFloodOfSilentPlugins covers that.)
func TestRegisterInFlightLimit(t *testing.T) {
	dir := shortDir(t)
	m := testManager(t, dir, Config{}, Sources{})
	client := registrationClient(t, m.SocketPath())
	hung := unregisteredPlugin(t, dir, gpu, "hung.sock")
	hung.SetFaults(plugintest.Faults{HangOptions: true})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	results := make([]chan error, maxRegistersPerEndpoint+1)
	wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer wcancel()
	for i := range results { // one at a time, so that the first is the oldest
		results[i] = make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := client.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: gpu, Endpoint: "hung.sock"})
			results[i] <- err
		}()
		if err := hung.WaitForCalls(wctx, func(c plugintest.Calls) bool { return c.Options == i+1 }); err != nil {
			t.Fatalf("Register %d never reached the plugin: %v", i+1, err)
		}
	}
	select {
	case err := <-results[0]:
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), ErrRegistrationSuperseded.Error()) ||
			!strings.Contains(err.Error(), gpu) {
			t.Errorf("oldest Register in flight: got %v, want ResourceExhausted (%v) naming %s", err, ErrRegistrationSuperseded, gpu)
		}
	case <-wctx.Done():
		t.Fatal("the oldest Register in flight was not cancelled when a third one came")
	}
	for i, res := range results[1:] {
		select {
		case err := <-res:
			t.Errorf("Register %d ended while the bound allows it: %v", i+2, err)
		default:
		}
	}
	// Another resource is not held up by gpu's calls.
	testPlugin(t, dir, "example.com/other", "other.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "x"))
	waitFor(t, m, "the other resource", func() bool { return capacityIs(m, "example.com/other", 1, 1) })

	cancel()
	wg.Wait()
	testPlugin(t, dir, gpu, "gpu.sock", &pluginapi.DevicePluginOptions{}, devices(pluginapi.Healthy, "a"))
	waitFor(t, m, "gpu registered once the calls in flight ended", func() bool { return capacityIs(m, gpu, 1, 1) })
}

// TestRegisterLimiter: past a bound the newest call is admitted and an older one is cancelled
// with a superseded cause: the oldest for the same resource and endpoint, or, past the total,
// the oldest of the busiest registrant; done is idempotent and the limiter forgets every call
// that ended.
func TestRegisterLimiter(t *testing.T) {
	l := &registerLimiter{maxPerEndpoint: 2, maxTotal: 3}
	bg := context.Background()
	a1, doneA1 := l.admit(bg, "a", "s")
	a2, doneA2 := l.admit(bg, "a", "s")
	a3, doneA3 := l.admit(bg, "a", "s") // supersedes a1: 2 per resource and endpoint
	wantSuperseded(t, "a1 after a third call for a and s", a1, "a", "2 calls for one resource and endpoint")
	wantLive(t, "a2", a2)
	wantLive(t, "a3", a3)
	b1, doneB1 := l.admit(bg, "b", "s")
	wantLive(t, "b1", b1)
	c1, doneC1 := l.admit(bg, "c", "t") // supersedes a2, the oldest: 3 in all
	wantSuperseded(t, "a2 after a fourth call in flight", a2, "a", "3 device plugin registrations")
	for what, ctx := range map[string]context.Context{"a3": a3, "b1": b1, "c1": c1} {
		wantLive(t, what, ctx)
	}
	doneA1() // superseded calls no longer count: nothing more is freed
	doneA2()
	doneB1()
	doneB1() // idempotent: must not free a second slot
	if n := l.inFlight(); n != 2 {
		t.Fatalf("after b1 ended: %d in flight, want 2 (a3, c1)", n)
	}
	d1, doneD1 := l.admit(bg, "d", "u") // a free slot: nothing is superseded
	wantLive(t, "a3", a3)
	wantLive(t, "d1", d1)
	if superseded(b1) != nil {
		t.Errorf("a call that ended is reported superseded: %v", superseded(b1))
	}
	parent, cancel := context.WithCancel(bg)
	e1, doneE1 := l.admit(parent, "e", "v") // supersedes a3
	wantSuperseded(t, "a3 after a fourth call in flight", a3, "a", "3 device plugin registrations")
	cancel()
	if e1.Err() == nil || superseded(e1) != nil {
		t.Errorf("a call whose caller went: err %v, superseded %v; want cancelled, not superseded", e1.Err(), superseded(e1))
	}
	for _, done := range []func(){doneA3, doneC1, doneD1, doneE1} {
		done()
	}
	if n := l.inFlight(); n != 0 {
		t.Fatalf("%d calls still counted after all ended", n)
	}
}

// TestRegisterLimiterBusiestRegistrant: past the total, the cancelled call is the oldest of
// the process holding the most calls, and within it of the connection holding the most; a
// registrant with fewer calls keeps its call however many newer calls come.
func TestRegisterLimiterBusiestRegistrant(t *testing.T) {
	l := &registerLimiter{maxTotal: 4}
	from := func(pid int32, conn uint64) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: registrantInfo{registrant: registrant{pid: pid, conn: conn}}})
	}
	var dones []func()
	admit := func(ctx context.Context, resource string) context.Context {
		c, done := l.admit(ctx, resource, resource+".sock")
		dones = append(dones, done)
		return c
	}
	defer func() {
		for _, done := range dones {
			done()
		}
	}()
	live := admit(from(2, 9), "live")       // another process, the oldest call
	f1 := admit(from(1, 1), "f1")           // the flood: process 1, connection 1
	other := admit(from(1, 2), "same-proc") // process 1, another connection
	f2 := admit(from(1, 1), "f2")
	f3 := admit(from(1, 1), "f3") // 5 > 4: process 1 holds 4, connection 1 holds 3
	wantSuperseded(t, "the flood's oldest call", f1, "f1", "4 device plugin registrations")
	for i := range 20 {
		admit(from(1, 1), fmt.Sprintf("f%d", i+4))
	}
	wantLive(t, "another process's call", live)
	wantLive(t, "the flooding process's call on a quieter connection", other)
	wantSuperseded(t, "older flood calls", f2, "f2", "4 device plugin registrations")
	wantSuperseded(t, "older flood calls", f3, "f3", "4 device plugin registrations")
	// Registrants holding as many calls each: the oldest call goes.
	l2 := &registerLimiter{maxTotal: 2}
	x, doneX := l2.admit(from(3, 1), "x", "x.sock")
	y, doneY := l2.admit(from(4, 1), "y", "y.sock")
	z, doneZ := l2.admit(from(5, 1), "z", "z.sock")
	defer func() { doneX(); doneY(); doneZ() }()
	wantSuperseded(t, "the oldest of equals", x, "x", "2 device plugin registrations")
	wantLive(t, "y", y)
	wantLive(t, "z", z)
}

// TestRegisterLimiterBusiestPrincipal: past the total, calls are cancelled by principal (user
// and control group) first: a flood from many processes of one principal, each holding one
// call and coming back at once, turns over among its own calls, and a call of another
// principal, the oldest of all, stays. In the stage waiting for an answer the bound is named
// as such, and several calls for one resource and endpoint are not a bound there.
func TestRegisterLimiterBusiestPrincipal(t *testing.T) {
	from := func(uid uint32, cgroup string, pid int32) context.Context {
		r := registrant{principal: principal{uid: uid, cgroup: cgroup}, pid: pid, conn: uint64(pid)}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: registrantInfo{registrant: r}})
	}
	for _, tc := range []struct {
		name   string
		plugin context.Context
	}{
		{"another user", from(0, "0::/system.slice/plugin.service", 1)},
		{"another control group", from(1000, "0::/kubepods/pod-plugin", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &registerLimiter{awaiting: true, maxTotal: 4}
			var dones []func()
			defer func() {
				for _, done := range dones {
					done()
				}
			}()
			live, done := l.admit(tc.plugin, "example.com/gpu", "gpu.sock")
			dones = append(dones, done)
			var flood []context.Context
			for pid := range int32(40) {
				ctx, done := l.admit(from(1000, "0::/kubepods/pod-flood", 100+pid), "example.com/gpu", "silent.sock")
				dones = append(dones, done)
				flood = append(flood, ctx)
			}
			wantLive(t, "the other principal's call", live)
			wantSuperseded(t, "the flood's oldest call", flood[0], "example.com/gpu", "4 device plugin registrations wait for their plugin to answer")
			for i, ctx := range flood[len(flood)-3:] {
				wantLive(t, fmt.Sprintf("flood call %d", len(flood)-3+i), ctx)
			}
		})
	}
}

func wantSuperseded(t *testing.T, what string, ctx context.Context, resource, bound string) {
	t.Helper()
	if ctx.Err() == nil {
		t.Fatalf("%s is not cancelled", what)
	}
	err := superseded(ctx)
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ErrRegistrationSuperseded) ||
		!strings.Contains(err.Error(), fmt.Sprintf("resource %q", resource)) || !strings.Contains(err.Error(), bound) {
		t.Fatalf("%s: cause %v, want ResourceExhausted %v naming resource %q and %q", what, err, ErrRegistrationSuperseded, resource, bound)
	}
}

func wantLive(t *testing.T, what string, ctx context.Context) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("%s is cancelled: %v", what, context.Cause(ctx))
	}
}

func TestLogLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	l := &logLimiter{interval: 10 * time.Second, maxKeys: 3}
	steps := []struct {
		key            string
		at             time.Duration
		ok             bool
		wantSuppressed int
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"a", 9 * time.Second, false, 0},
		{"b", 9 * time.Second, true, 0}, // causes are independent
		{"a", 10 * time.Second, true, 2},
		{"a", 11 * time.Second, false, 0},
		{"a", 30 * time.Second, true, 1},
		{"a", 41 * time.Second, true, 0},
		// Full (a, b, c): b is quiet for an interval and is forgotten; d takes its place.
		{"c", 41 * time.Second, true, 0},
		{"d", 41 * time.Second, true, 0},
		// Full with a, c, d all recent: new causes share the overflow cause.
		{"e", 42 * time.Second, true, 0},
		{"f", 42 * time.Second, false, 0},
		{"g", 43 * time.Second, false, 0},
		// An interval after the last pruning, the quiet causes are forgotten: h, i and j get
		// their own; the overflow cause keeps its count and reports it when it next passes.
		{"h", 52 * time.Second, true, 0},
		{"i", 52 * time.Second, true, 0},
		{"j", 52 * time.Second, true, 0},
		{"k", 53 * time.Second, true, 2},
		{"l", 54 * time.Second, false, 0},
		{"h", 62 * time.Second, true, 0},
	}
	for i, s := range steps {
		ok, n := l.allow(s.key, at(s.at))
		if ok != s.ok || n != s.wantSuppressed {
			t.Fatalf("step %d (%s at %v): allow = %v, %d; want %v, %d", i, s.key, s.at, ok, n, s.ok, s.wantSuppressed)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.causes) > 3 {
		t.Fatalf("limiter remembers %d causes, want at most maxKeys (3)", len(l.causes))
	}
}

// TestRegistrationMetricLabels: each name gets its series up to the bound; past it, new names
// share one series, so made-up names cannot grow the registry for ever.
func TestRegistrationMetricLabels(t *testing.T) {
	met, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxRegistrationLabels + 10 {
		met.countRegistration(fmt.Sprintf("example.com/r%d", i))
	}
	met.countRegistration("example.com/r0")
	if got := testutil.CollectAndCount(met.registrations); got != maxRegistrationLabels+1 {
		t.Fatalf("%d series, want %d plus the overflow series", got, maxRegistrationLabels)
	}
	if got := testutil.ToFloat64(met.registrations.WithLabelValues(otherResourceLabel)); got != 10 {
		t.Errorf("overflow series = %v, want 10", got)
	}
	if got := testutil.ToFloat64(met.registrations.WithLabelValues("example.com/r0")); got != 2 {
		t.Errorf("a known name's series = %v, want 2", got)
	}
}
