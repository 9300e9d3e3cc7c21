// Package browsertest renders a page in headless Chromium (Debian's
// chromium package) for tests: one run writes a screenshot and prints the
// DOM the page's scripts built, which the helpers here read by element id.
// Without Chromium a test skips, and fails in CI (internal/citest).
//
// Test code only: no production package imports it.
package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
)

// ScreenshotDirEnv names a directory that keeps the screenshots (a
// temporary one otherwise).
const ScreenshotDirEnv = "STATUS_SCREENSHOT_DIR"

// Window is the browser window's size, and the screenshot's.
const (
	Width  = 1280
	Height = 1000
)

// Chromium returns the browser's path, or skips t (fails it in CI).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	citest.Need(t, "no Chromium installed (apt-get install chromium)")
	return ""
}

// Page is what Chromium made of a page.
type Page struct {
	URL  string
	DOM  string // the serialized DOM after the page's scripts ran
	Text string // its text, without scripts, styles, the title and <pre id="raw">
}

// Render loads url in Chromium (flags added, e.g. a virtual time budget),
// saves a screenshot named name.png and checks it shows a rendered page.
func Render(t testing.TB, bin, url, name string, flags ...string) *Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := os.Getenv(ScreenshotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, name+".png")
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", fmt.Sprintf("--window-size=%d,%d", Width, Height),
		"--user-data-dir=" + t.TempDir(), "--screenshot=" + shot, "--dump-dom"}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.Bytes())
	}
	checkScreenshot(t, shot)
	return &Page{URL: url, DOM: string(out), Text: visibleText(string(out))}
}

// checkScreenshot: a PNG of the window, not a blank one.
func checkScreenshot(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	colors := map[uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 7 {
		for x := r.Min.X; x < r.Max.X; x += 7 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			colors[cr>>8<<16|cg>>8<<8|cb>>8] = true
		}
	}
	if r.Dx() != Width || r.Dy() != Height || len(colors) < 16 {
		t.Fatalf("screenshot %s: %dx%d with %d colours: not a rendered page", path, r.Dx(), r.Dy(), len(colors))
	}
	t.Logf("screenshot: %s", path)
}

var (
	hiddenRE = regexp.MustCompile(`(?s)<script.*?</script>|<style.*?</style>|<title>.*?</title>|<pre id="raw">.*?</pre>`)
	tagRE    = regexp.MustCompile(`<[^>]*>`)
)

func visibleText(dom string) string {
	s := tagRE.ReplaceAllString(hiddenRE.ReplaceAllString(dom, " "), " ")
	return strings.Join(strings.Fields(unescape(s)), " ")
}

func unescape(s string) string {
	return strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&nbsp;", " ", "&quot;", `"`).Replace(s)
}

// Tag is the start tag of the element with id.
func (p *Page) Tag(t testing.TB, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<[a-z]+ [^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(p.DOM)
	if m == "" {
		t.Fatalf("no element #%s in the rendered page:\n%s", id, p.Text)
	}
	return m
}

// Has reports whether the page has an element with id.
func (p *Page) Has(id string) bool { return strings.Contains(p.DOM, ` id="`+id+`"`) }

// Attr is the attribute name of the element with id.
func (p *Page) Attr(t testing.TB, id, name string) string {
	t.Helper()
	m := regexp.MustCompile(`\b` + name + `="([^"]*)"`).FindStringSubmatch(p.Tag(t, id))
	if m == nil {
		t.Fatalf("#%s has no %s: %s", id, name, p.Tag(t, id))
	}
	return unescape(m[1])
}

// TextOf is the text of the element with id, up to its first child element.
func (p *Page) TextOf(t testing.TB, id string) string {
	t.Helper()
	tag := p.Tag(t, id)
	rest := p.DOM[strings.Index(p.DOM, tag)+len(tag):]
	return unescape(rest[:strings.Index(rest, "<")])
}

// Inner is the markup of the element with id up to the first end tag
// closing (a chart's SVG up to "</svg>").
func (p *Page) Inner(t testing.TB, id, end string) string {
	t.Helper()
	tag := p.Tag(t, id)
	s := p.DOM[strings.Index(p.DOM, tag):]
	i := strings.Index(s, end)
	if i < 0 {
		t.Fatalf("#%s has no %s", id, end)
	}
	return s[:i]
}

var (
	// snakeRE is a JSON key shown as is (checkpoint_lag, tip_time_us).
	snakeRE = regexp.MustCompile(`\b[a-z]+_[a-z_]+\b`)
	// rawNumberRE is a number no person reads: a microsecond timestamp, a
	// long integer without separators, a float with many decimals.
	rawNumberRE = regexp.MustCompile(`\b\d{6,}\b|\d\.\d{4,}`)
)

// RequireHuman fails t if the page's text shows a JSON key as is or a
// number without separators or with many decimals.
func (p *Page) RequireHuman(t testing.TB) {
	t.Helper()
	if k := snakeRE.FindAllString(p.Text, 5); k != nil {
		t.Errorf("raw keys shown: %q in\n%s", k, p.Text)
	}
	if n := rawNumberRE.FindAllString(p.Text, 5); n != nil {
		t.Errorf("raw numbers shown: %q in\n%s", n, p.Text)
	}
}

// FollowJSON fetches the target of the link with id as a browser would
// (Accept: text/html) and decodes it: the link must answer JSON.
func (p *Page) FollowJSON(t testing.TB, id string) map[string]any {
	t.Helper()
	href := p.Attr(t, id, "href")
	base, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := url.Parse(href)
	if err != nil {
		t.Fatalf("link #%s %q: %v", id, href, err)
	}
	req, _ := http.NewRequest("GET", base.ResolveReference(ref).String(), nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("link #%s %s: %d %s", id, href, resp.StatusCode, ct)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("link #%s %s: %v", id, href, err)
	}
	return m
}

// ChartPoints is the number of points of the chart (an SVG with a
// polyline) with id, checked against its data-points attribute.
func (p *Page) ChartPoints(t testing.TB, id string) int {
	t.Helper()
	n := 0
	if m := regexp.MustCompile(`<polyline points="([^"]*)"`).FindStringSubmatch(p.Inner(t, id, "</svg>")); m != nil {
		n = len(strings.Fields(m[1]))
	}
	if attr := p.Attr(t, id, "data-points"); attr != fmt.Sprint(n) {
		t.Errorf("#%s says %s points and draws %d", id, attr, n)
	}
	return n
}
