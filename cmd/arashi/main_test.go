package main

import (
	"path/filepath"
	"testing"
)

func TestBadArguments(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"-nosuchflag"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"-degrade", "sometimes"}, 2},
		{[]string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, 1},
		{[]string{"-users", "-1", "-addr", "127.0.0.1:0"}, 1},
	}
	for _, tt := range tests {
		if got := run(tt.args); got != tt.want {
			t.Errorf("run(%q) = %d, want %d", tt.args, got, tt.want)
		}
	}
}
