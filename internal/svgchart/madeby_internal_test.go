package svgchart

import "testing"

func TestMadeBy(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/tmp/go-build1/exe/arashi-load", "-experiment", "sweep"}, "go run ./cmd/arashi-load -experiment sweep"},
		{[]string{"sandstorm-plot"}, "go run ./cmd/sandstorm-plot"},
		{[]string{"x.test", "--flag"}, "go run ./cmd/x - -flag"},
	} {
		if got := madeBy(tc.args); got != tc.want {
			t.Errorf("madeBy(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
