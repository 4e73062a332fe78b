package s3layout

import "testing"

// TestFolders: a server's folder is under its cluster's under the
// configured one; the cluster is read back from a folder and from a
// config.yaml, and none is found in the layout before (the configured
// folder itself), elsewhere, or in a name that only looks like one.
func TestFolders(t *testing.T) {
	id := ClusterID([]byte("host key"))
	if len(id) != 12 || id == ClusterID([]byte("another host key")) {
		t.Fatalf("ids %q", id)
	}
	if got := Folder("k3s/mgmt", id, "lab-mgmt-2"); got != "k3s/mgmt/cluster-"+id+"/lab-mgmt-2" {
		t.Errorf("S3Folder = %q", got)
	}
	if got := Folder("", id, "lab-mgmt"); got != "cluster-"+id+"/lab-mgmt" {
		t.Errorf("S3Folder at the root = %q", got)
	}
	for _, tc := range []struct{ folder, dir, want string }{
		{"k3s/mgmt", "k3s/mgmt/cluster-" + id + "/lab-mgmt", id},
		{"", "cluster-" + id + "/lab-mgmt", id},
		{"k3s/mgmt", "k3s/mgmt", ""},
		{"k3s/mgmt", "k3s/mgmt2/cluster-" + id + "/lab-mgmt", ""},
		{"k3s/mgmt", "k3s/mgmt/cluster-xyz/lab-mgmt", ""},
		{"k3s/mgmt", "other/cluster-" + id + "/lab-mgmt", ""},
	} {
		if got := ClusterOf(tc.folder, tc.dir); got != tc.want {
			t.Errorf("ClusterOf(%q, %q) = %q, want %q", tc.folder, tc.dir, got, tc.want)
		}
	}
	cfg := []byte("etcd-s3: true\netcd-s3-folder: \"" + Folder("k3s/mgmt", id, "lab-mgmt") + "\"\n")
	if got := ClusterInConfig("k3s/mgmt", cfg); got != id {
		t.Errorf("ClusterInConfig = %q, want %q", got, id)
	}
	if got := ClusterInConfig("k3s/mgmt", []byte("etcd-s3-folder: \"k3s/mgmt\"\n")); got != "" {
		t.Errorf("the layout before: %q", got)
	}
}
