// Package charts packages upstream's Helm charts from their Go modules, as
// their release tooling packages them, for the lab's chart repositories:
//
//   - cert-manager: deploy/charts/cert-manager of
//     github.com/cert-manager/cert-manager at the chart's version, with the
//     version, appVersion and Artifact Hub annotations its release tool
//     sets (make/manifests.mk, the Chart.yaml rule);
//   - cluster-api-operator: hack/charts/cluster-api-operator of
//     sigs.k8s.io/cluster-api-operator at v<version>, with
//     templates/operator-components.yaml built by kustomize from
//     config/chart and the manager image's tag set in values.yaml, then
//     `helm package --version --app-version` (its Makefile: release-chart,
//     set-manifest-image-chart). Its published index says appVersion
//     v<version> (docs/upstream.md §4.6), which is what the caller
//     passes.
//
// So a chart installed in the lab is upstream's: its templates, its
// values.yaml and its values.schema.json.
package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/mgmtctl/mgmtctl/lab/internal/fixtures"
)

// Source is where a chart's files are, and what its release tooling does
// to them before packaging.
type Source struct {
	Name string
	// Module is the Go module that holds the chart at a chart version.
	Module func(version string) fixtures.Module
	// Dir is the chart's directory in the module.
	Dir string
	// Release makes the release's changes to the loaded chart; mod is the
	// module's directory.
	Release func(c *chart.Chart, version, mod string) error
}

// Sources are the charts the lab can package, by name.
var Sources = map[string]Source{
	"cert-manager": {
		Name:   "cert-manager",
		Module: func(v string) fixtures.Module { return fixtures.Module{Path: fixtures.CertManager.Path, Version: v} },
		Dir:    "deploy/charts/cert-manager",
		Release: func(c *chart.Chart, v, mod string) error {
			key, err := os.ReadFile(filepath.Join(mod, "deploy/charts/cert-manager/signkey_annotation.txt"))
			if err != nil {
				return err
			}
			if c.Metadata.Annotations == nil {
				c.Metadata.Annotations = map[string]string{}
			}
			c.Metadata.Annotations["artifacthub.io/signKey"] = string(key)
			c.Metadata.Annotations["artifacthub.io/prerelease"] = "false"
			return nil
		},
	},
	"cluster-api-operator": {
		Name:   "cluster-api-operator",
		Module: func(v string) fixtures.Module { return fixtures.Module{Path: fixtures.Operator.Path, Version: "v" + v} },
		Dir:    "hack/charts/cluster-api-operator",
		Release: func(c *chart.Chart, v, mod string) error {
			k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
			res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(mod, "config/chart"))
			if err != nil {
				return fmt.Errorf("kustomize build config/chart: %w", err)
			}
			components, err := res.AsYaml()
			if err != nil {
				return err
			}
			c.Templates = append(c.Templates, &chart.File{Name: "templates/operator-components.yaml", Data: components})
			// set-manifest-image-chart: the manager image of the release
			// (PROD_REGISTRY, the release's tag), set as yq sets it.
			return setValues(c, []string{"image", "manager"}, map[string]string{
				"repository": "registry.k8s.io/capi-operator/cluster-api-operator",
				"tag":        "v" + strings.TrimPrefix(v, "v"),
			})
		},
	},
}

// Package builds chart name at version, with appVersion, from its module
// (fetched by the go command when missing) and returns the .tgz helm
// package writes.
func Package(name, version, appVersion string) ([]byte, error) {
	src, ok := Sources[name]
	if !ok {
		return nil, fmt.Errorf("no source for chart %s", name)
	}
	m := src.Module(version)
	dirs, err := fixtures.Download([]fixtures.Module{m})
	if err != nil {
		return nil, err
	}
	return pack(src, version, appVersion, dirs[m])
}

// pack loads the chart from the module at mod and packages it.
func pack(src Source, version, appVersion, mod string) ([]byte, error) {
	c, err := loader.LoadDir(filepath.Join(mod, src.Dir))
	if err != nil {
		return nil, fmt.Errorf("load chart %s from %s: %w", src.Name, mod, err)
	}
	// helm package --version --app-version.
	c.Metadata.Version, c.Metadata.AppVersion = version, appVersion
	if src.Release != nil {
		if err := src.Release(c, version, mod); err != nil {
			return nil, fmt.Errorf("chart %s %s: %w", src.Name, version, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p, err := chartutil.Save(c, dir)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// setValues sets fields of the map at path in the chart's values.yaml
// (its raw file, which helm package writes, edited as yq edits it:
// comments and order kept) and in its parsed values alike.
func setValues(c *chart.Chart, path []string, fields map[string]string) error {
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		doc, err := kyaml.Parse(string(f.Data))
		if err != nil {
			return err
		}
		m, err := doc.Pipe(kyaml.LookupCreate(kyaml.MappingNode, path...))
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := m.PipeE(kyaml.SetField(k, kyaml.NewStringRNode(fields[k]))); err != nil {
				return err
			}
		}
		out, err := doc.String()
		if err != nil {
			return err
		}
		f.Data = []byte(out)
		v, err := chartutil.ReadValues(f.Data)
		if err != nil {
			return err
		}
		c.Values = v
		return nil
	}
	return fmt.Errorf("chart %s has no %s", c.Name(), chartutil.ValuesfileName)
}
