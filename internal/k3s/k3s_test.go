package k3s

import (
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParseVersion(t *testing.T) {
	tests := map[string]string{
		"k3s version v1.35.7+k3s1 (abcdef12)\ngo version go1.24.5\n": "v1.35.7+k3s1",
		"k3s version v1.36.3+k3s1 (0123abcd)\n":                      "v1.36.3+k3s1",
		"":                                                           "",
		"sh: 1: k3s: not found\n":                                    "",
	}
	for in, want := range tests {
		if got := ParseVersion(in); got != want {
			t.Errorf("ParseVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRenderConfigGolden(t *testing.T) {
	got := RenderConfig("192.0.2.50")
	if *update {
		os.WriteFile("testdata/config.yaml", got, 0o644)
	}
	want, err := os.ReadFile("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
