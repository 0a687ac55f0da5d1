package nodestatus

import (
	"os"
	"testing"

	"github.com/kdm-project/kdm/agent/internal/apitest"
)

func TestMain(m *testing.M) { os.Exit(apitest.Main(m, testCluster)) }
