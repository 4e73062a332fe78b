package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mgmtctl/mgmtctl/internal/effect"
	"github.com/mgmtctl/mgmtctl/internal/pve"
	"github.com/mgmtctl/mgmtctl/internal/remote"
	"github.com/mgmtctl/mgmtctl/internal/step"
)

// Image puts the pinned cloud image on the node, verified by its sha256.
type Image struct{ N *Node }

var _ step.Finisher = (*Image)(nil)

// ID implements step.Step.
func (s *Image) ID() string { return "image" }

// Host implements step.Step.
func (s *Image) Host() string { return s.N.Name() }

// Check implements step.Step.
func (s *Image) Check(ctx context.Context) (step.Plan, error) {
	if s.N.API != nil {
		return s.checkAPI(ctx)
	}
	sp := s.N.Spec
	want, got, p := sp.ImageSHA256, s.N.Facts.ImageSHA256, s.N.ImagePath()
	download := []effect.Effect{s.N.run(remote.Script("download "+sp.ImageURL, downloadScript, sp.ImageURL, p, want))}
	switch got {
	case want:
		return step.Plan{Note: p + " present, sha256 verified"}, nil
	case "":
		return step.Plan{Changes: []step.Change{{Target: p, Action: step.Create,
			Summary: "download " + sp.ImageURL + " to " + p, Effects: download}}}, nil
	}
	return step.Plan{Changes: []step.Change{{Target: p, Action: step.Update,
		Summary: fmt.Sprintf("replace %s (sha256 %s, want %s)", p, got, want), Effects: download}}}, nil
}

// downloadScript fetches $1 to a temporary name beside $2, checks its
// sha256 against $3 and only then renames it: the final name never holds an
// unverified file. The sum it verified is then recorded beside the file
// (remote.SHA256Record), so the next runs read the image's sum without
// hashing it again while the file is unchanged; the old record goes first,
// so a run cut short leaves none rather than a stale one.
const downloadScript = `set -eu
url=$1 dst=$2 want=$3
mkdir -p -- "$(dirname -- "$dst")"
tmp=$(mktemp "$dst.mgmtctl-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
# A signal ends the script through exit, so the EXIT trap still runs.
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
# A stalled transfer (no byte for a minute) fails rather than hangs.
if command -v curl >/dev/null 2>&1; then
  curl -fsSL --retry 3 --connect-timeout 30 --speed-limit 1 --speed-time 60 -o "$tmp" -- "$url"
else
  wget -q --timeout=60 -O "$tmp" -- "$url"
fi
got=$(sha256sum < "$tmp" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "sha256 mismatch for $url: want $want, got $got" >&2
  exit 65
fi
chmod 644 "$tmp"
rm -f -- "$dst.sha256"
mv -f -- "$tmp" "$dst"
trap - EXIT
` + remote.SHA256Record

// checkAPI is the image through the API: the volume present, or Proxmox
// told to download it into the image storage's 'import' content with the
// sha256 it must have (download-url: the file is fetched beside its final
// name and renamed only once its checksum matched).
func (s *Image) checkAPI(ctx context.Context) (step.Plan, error) {
	n, sp := s.N, s.N.Spec
	vol := n.ImageVolID()
	if n.Facts.ImageSHA256 == sp.ImageSHA256 {
		return step.Plan{Note: vol + " present (downloaded by Proxmox with its sha256 verified)"}, nil
	}
	if err := n.needsVersion(ctx, MinImportVersion, "downloading the image into 'import' content"); err != nil {
		return step.Plan{}, err
	}
	call := effect.Call{Method: "POST", Path: "/nodes/" + url.PathEscape(sp.Node) + "/storage/" + url.PathEscape(sp.ImageStorage) + "/download-url",
		Params: url.Values{"url": {sp.ImageURL}, "content": {"import"}, "filename": {n.ImageFile()},
			"checksum": {sp.ImageSHA256}, "checksum-algorithm": {"sha256"}}}
	return step.Plan{Changes: []step.Change{{Target: vol, Action: step.Create,
		Summary: "download " + sp.ImageURL + " to " + vol + " (Proxmox checks its sha256)", Effects: []effect.Effect{call}}}}, nil
}

// Finish implements step.Finisher: a checksum mismatch (the script's
// exit 65, or download-url's task) is said as one.
func (s *Image) Finish(ctx context.Context, out []remote.Result, err error) error {
	var te *pve.TaskError
	if errors.As(err, &te) && strings.HasPrefix(te.Exit, "checksum mismatch") {
		return fmt.Errorf("download image to %s: %s; Proxmox kept nothing under the final name", s.N.ImageVolID(), te.Exit)
	}
	if err != nil && s.N.API != nil {
		return fmt.Errorf("image %s: %w", s.N.ImageVolID(), err)
	}
	var ee *remote.ExitError
	if errors.As(err, &ee) && ee.Code == 65 {
		return fmt.Errorf("download image to %s: %s; nothing was kept under the final name", s.N.ImagePath(), ee.Stderr)
	}
	if err != nil {
		return fmt.Errorf("image %s: %w", s.N.ImagePath(), err)
	}
	// The image as the node has it now, read again as every fact a step
	// changed is (ARCHITECTURE.md), not assumed from the plan: the sum
	// of the file (or the volume in api access) the next steps use.
	if err := s.N.Gather(ctx); err != nil {
		return err
	}
	if got := s.N.Facts.ImageSHA256; got != s.N.Spec.ImageSHA256 {
		where := s.N.ImagePath()
		if s.N.API != nil {
			where = s.N.ImageVolID()
		}
		return fmt.Errorf("image %s: downloaded, but the node then showed it with sha256 %q, not %s", where, got, s.N.Spec.ImageSHA256)
	}
	return nil
}
