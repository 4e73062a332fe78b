package version

import "testing"

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"8.3.5", "8.4", -1},   // Proxmox VE
		{"8.4", "8.4.0", 0},    // a missing number is 0
		{"9.2.11", "9.2.2", 1}, // numbers, not text
		{"v1.12.11", "v1.12.10", 1},
		{"0.28.0", "v0.28.0", 0}, // the operator's chart carries no v
		{"v1.35.7+k3s1", "v1.35.7+k3s2", -1},
		{"v1.35.7+k3s2", "v1.35.8+k3s1", -1}, // the patch before the build
		{"v1.35.7", "v1.35.7+k3s1", -1},
		{"v1.36.0-rc.1", "v1.36.0", 0}, // a pre-release's numbers are its release's
		{"v2.0.0", "v1.99.99", 1},
	} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Compare(tc.b, tc.a); got != -tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

func TestLine(t *testing.T) {
	for v, want := range map[string]string{"v1.35.7+k3s1": "1.35", "0.28.0": "0.28", "9.2.11": "9.2", "v1": ""} {
		if got, _ := Line(v); got != want {
			t.Errorf("Line(%q) = %q, want %q", v, got, want)
		}
	}
}
