// Package browsertest drives a headless Chromium for tests: it loads a page,
// lets its scripts run, and returns the DOM they left or a screenshot. Tests
// check the DOM, not pixels; screenshots are artifacts for people.
//
// The tests that use it skip when no Chromium is installed (Debian's
// package chromium; .ci/run installs it) and in -short mode.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ArtifactsEnv names the environment variable holding the directory test
// artifacts (screenshots, DOM dumps) are saved in; .ci/run sets it.
const ArtifactsEnv = "SANDSTORM_ARTIFACTS"

// Path returns the Chromium binary found in PATH, or "".
func Path() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser runs one headless Chromium per page load.
type Browser struct {
	t   testing.TB
	bin string
	// Budget is how much virtual time the page's scripts get before the
	// DOM is dumped or the screenshot taken (virtual time stands still
	// while a request is pending, so a page waiting for the server is not
	// cut short). Default 3 s.
	Budget time.Duration
	// Timeout bounds one Chromium run in real time. Default 60 s.
	Timeout time.Duration
}

// New returns a Browser, or skips the test when Chromium is not installed
// or in -short mode.
func New(t testing.TB) *Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bin := Path()
	if bin == "" {
		t.Skip("chromium not installed (apt-get install chromium): browser test skipped")
	}
	return &Browser{t: t, bin: bin, Budget: 3 * time.Second, Timeout: time.Minute}
}

// run starts Chromium on url with the flags a closed sandbox needs (no
// network beyond the page, a new profile) plus extra, and returns its
// standard output.
func (b *Browser) run(url string, extra ...string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir=" + b.t.TempDir(),
		"--virtual-time-budget=" + strconv.FormatInt(b.Budget.Milliseconds(), 10),
	}, extra...)
	args = append(args, url)
	cmd := exec.CommandContext(ctx, b.bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.t.Fatalf("chromium %v %s: %v\n%s", extra, url, err, stderr.String())
	}
	return out
}

// DOM loads url and returns the document as its scripts left it.
func (b *Browser) DOM(url string) string {
	b.t.Helper()
	return string(b.run(url, "--dump-dom"))
}

// Screenshot loads url in a window of width×height pixels and saves a PNG
// of it at path.
func (b *Browser) Screenshot(url, path string, width, height int) {
	b.t.Helper()
	b.run(url, "--screenshot="+path, "--window-size="+strconv.Itoa(width)+","+strconv.Itoa(height))
	st, err := os.Stat(path)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if st.Size() < 10_000 {
		b.t.Fatalf("screenshot %s: only %d bytes", path, st.Size())
	}
}

// ArtifactDir returns the directory test artifacts go to: $SANDSTORM_ARTIFACTS
// (created if needed) or, when unset, a temporary directory of the test.
// Name the files after the test: the directory is shared by every package.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv(ArtifactsEnv)
	if d == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// SaveArtifact writes data to name in ArtifactDir and returns its path.
func SaveArtifact(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(ArtifactDir(t), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var bodyRE = regexp.MustCompile(`<body[^>]*>`)

// BodyAttr returns the value of the attribute name of the dumped
// document's <body> (a dashboard publishes its state there as data-*
// attributes), and false if it has none.
func BodyAttr(dom, name string) (string, bool) {
	m := regexp.MustCompile(`\s` + regexp.QuoteMeta(name) + `="([^"]*)"`).FindStringSubmatch(bodyRE.FindString(dom))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// BodyInt is BodyAttr for an integer attribute; it fails the test if the
// attribute is missing or not a number.
func BodyInt(t testing.TB, dom, name string) int {
	t.Helper()
	v, ok := BodyAttr(dom, name)
	if !ok {
		t.Fatalf("<body> has no %s: %s", name, bodyRE.FindString(dom))
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("<body> %s=%q is not a number", name, v)
	}
	return n
}

// Body returns the dumped document's <body> start tag, for logs.
func Body(dom string) string { return bodyRE.FindString(dom) }
