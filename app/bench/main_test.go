package bench

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.UseProjectOpenVINO()
	goleak.VerifyTestMain(m)
}
