package config

import (
	"os"
	"path/filepath"
	"testing"
)

// Validation runs before every command; it must stay far below the cost of
// one SSH round trip.
func BenchmarkLoad(b *testing.B) {
	home := b.TempDir()
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte(testKey), 0o644)
	body, err := os.ReadFile(filepath.Join("testdata", "valid.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "mgmt.yaml")
	os.WriteFile(p, body, 0o644)
	env := Env{Home: home, Getenv: func(string) string { return "" }}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Load(p, "", env); err != nil {
			b.Fatal(err)
		}
	}
}
