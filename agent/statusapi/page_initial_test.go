package statusapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// hostileSource serves a state whose node name tries to end the page's data block.
type hostileSource struct{ fakeSource }

const hostileName = `</script><script>alert(1)</script><!--`

func (s *hostileSource) PageState() PageState {
	return PageState{Node: hostileName, Policy: "kdm", Resources: []PageResource{{Name: "example.com/gpu", Capacity: 3}}}
}

// TestPageCarriesInitialState: GET / serves the page with the state in it, as a JSON data
// block that parses back to the Source's PageState, so that the first paint needs no round
// trip; no name in the state can end the block or start a script.
func TestPageCarriesInitialState(t *testing.T) {
	mux := http.NewServeMux()
	src := &hostileSource{}
	if err := pageHandlers(mux, src, newStateStreams(src, clock.RealClock{}, klog.Background(), 1, time.Second)); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	page := string(body)
	const open = `<script type="application/json" id="initial-state">`
	_, rest, ok := strings.Cut(page, open)
	if !ok {
		t.Fatalf("the page has no initial state block:\n%s", page)
	}
	block, _, ok := strings.Cut(rest, "</script>")
	if !ok {
		t.Fatalf("the initial state block is not closed:\n%s", page)
	}
	var st PageState
	if err := json.Unmarshal([]byte(block), &st); err != nil {
		t.Fatalf("the initial state block is not the state's JSON (%v): %s", err, block)
	}
	if st.Node != hostileName || len(st.Resources) != 1 || st.Resources[0].Capacity != 3 {
		t.Errorf("the initial state is %+v, want the Source's", st)
	}
	if strings.Contains(page, hostileName) {
		t.Errorf("the node name reached the page unescaped:\n%s", page)
	}
	if strings.Contains(page, initialStateMark) {
		t.Errorf("the page still holds the mark %s", initialStateMark)
	}
	if !strings.Contains(page, `blocking="render"`) {
		t.Errorf("the page's script does not block the first paint until it has rendered the state")
	}
}
