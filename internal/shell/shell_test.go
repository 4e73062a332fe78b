package shell

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain word", "qm", "qm"},
		{"path", "/var/lib/vz/template/iso/noble.img", "/var/lib/vz/template/iso/noble.img"},
		{"empty", "", "''"},
		{"space", "a b", "'a b'"},
		{"single quote", "it's", `'it'\''s'`},
		{"command substitution", "$(reboot)", "'$(reboot)'"},
		{"backticks", "`id`", "'`id`'"},
		{"semicolon", "x; rm -rf /", "'x; rm -rf /'"},
		{"glob", "*", "'*'"},
		{"newline", "a\nb", "'a\nb'"},
		{"tilde", "~root", "'~root'"},
		{"token id", "capmox@pve!capi", "'capmox@pve!capi'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Quote(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Quote(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestQuoteRejectsNUL(t *testing.T) {
	if _, err := Quote("a\x00b"); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Quote with NUL: err = %v, want ErrUnsafe", err)
	}
	if _, err := Join("echo", "a\x00b"); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Join with NUL: err = %v, want ErrUnsafe", err)
	}
}

// TestJoinRoundTrip runs hostile values through a real /bin/sh and checks
// that the shell's argv is exactly what was quoted.
func TestJoinRoundTrip(t *testing.T) {
	hostile := []string{
		"", " ", "'", `"`, `\`, "$HOME", "${IFS}", "$(id)", "`id`", "a;b", "a&&b", "a|b",
		"a\nb", "\t", "*", "?", "[a]", "~", "!", "#comment", "-n", "--", "é ünïcode",
		"'\"'\"'", "%s%n", "a'b'c", "\x01\x7f",
	}
	for _, v := range hostile {
		line, err := Join("printf", "%s\\000", v)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", line).Output()
		if err != nil {
			t.Fatalf("sh -c %q: %v", line, err)
		}
		got := strings.TrimSuffix(string(out), "\x00")
		if got != v {
			t.Errorf("round trip of %q through %q gave %q", v, line, got)
		}
	}
}

func TestScriptPositional(t *testing.T) {
	line, err := Script(`printf '%s|' "$@"`, "a b", "$(id)", "'")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", line).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "a b|$(id)|'|"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
