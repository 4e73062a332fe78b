package redact

import (
	"bytes"
	"fmt"
	"testing"
)

func TestString(t *testing.T) {
	var x Redactor
	if got := x.String("nothing registered"); got != "nothing registered" {
		t.Fatalf("zero Redactor changed text: %q", got)
	}
	x.Add("5e9a1f7c-0000-4000-8000-123456789abc", "", "ab", "5e9a1f7c")
	tests := []struct{ in, want string }{
		{"secret=5e9a1f7c-0000-4000-8000-123456789abc;", "secret=" + Mask + ";"},
		{"prefix only 5e9a1f7c", "prefix only " + Mask},
		{"short ab is kept", "short ab is kept"},
		{"twice 5e9a1f7c 5e9a1f7c", "twice " + Mask + " " + Mask},
	}
	for _, tt := range tests {
		if got := x.String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWriter(t *testing.T) {
	var x Redactor
	x.Add("hunter22")
	var buf bytes.Buffer
	w := x.Writer(&buf)
	n, err := fmt.Fprintf(w, "password is hunter22\n")
	if err != nil || n != len("password is hunter22\n") {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := buf.String(); got != "password is "+Mask+"\n" {
		t.Errorf("got %q", got)
	}
}

func TestNilRedactor(t *testing.T) {
	var x *Redactor
	if got := x.String("a"); got != "a" {
		t.Errorf("nil redactor changed text")
	}
}
