// Command provision-osc prints what gardenlet v1.149.3 puts into a worker pool's
// OperatingSystemConfigs for the node agent, computed by gardenlet's own code rather than a
// copy of it, so the end-to-end tests boot nodes from the content a real landscape ships:
//
//   - "provision": the whole provision OSC (purpose provision) as gardenlet's
//     operatingsystemconfig component builds it: nodeinit.Config with the node agent's
//     component configuration; the node-init script pulls the image-vector entry
//     gardener-node-agent and runs `gardener-node-agent bootstrap`.
//   - "nodeAgent": the units and files of gardenlet's gardener-node-agent component of the
//     reconcile OSC (its unit, configuration, CA and the binary as an imageRef file).
//   - "rbac": the shoot's ClusterRoleBindings gardenlet ships for TLS bootstrapping (bootstrap
//     tokens may create CSRs, kubelet client CSRs are approved).
//
// The image comes from gardener's own image vector with IMAGEVECTOR_OVERWRITE applied, the
// same lookup gardenlet does, so the tests also check the overwrite docs/operations.md gives.
// Output: one JSON object {"provision": <OSC>, "nodeAgent": {"units": [...], "files": [...]},
// "rbac": [<ClusterRoleBinding>...]}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/Masterminds/semver/v3"
	"github.com/gardener/gardener/imagevector"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/component/extensions/operatingsystemconfig/nodeinit"
	"github.com/gardener/gardener/pkg/component/extensions/operatingsystemconfig/original/components"
	"github.com/gardener/gardener/pkg/component/extensions/operatingsystemconfig/original/components/nodeagent"
	gardenletfeatures "github.com/gardener/gardener/pkg/gardenlet/features"
	imagevectorutils "github.com/gardener/gardener/pkg/utils/imagevector"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type options struct {
	name, namespace, pool, osType string
	secretName, server, caFile    string
	kubernetesVersion             string
}

func main() {
	var o options
	flag.StringVar(&o.name, "name", "", "name of the provision OSC")
	flag.StringVar(&o.namespace, "namespace", "", "seed namespace of the shoot")
	flag.StringVar(&o.pool, "pool", "", "worker pool")
	flag.StringVar(&o.osType, "os-type", "debian", "machine image name (the OSC's type)")
	flag.StringVar(&o.secretName, "secret-name", "", "the pool's node-agent Secret in the shoot")
	flag.StringVar(&o.server, "server", "", "the shoot kube-apiserver's URL")
	flag.StringVar(&o.caFile, "ca-file", "", "the shoot's cluster CA bundle (PEM)")
	flag.StringVar(&o.kubernetesVersion, "kubernetes-version", "", "the pool's Kubernetes version")
	flag.Parse()
	// gardenlet's feature gates at their defaults, as gardenlet registers them at start.
	gardenletfeatures.RegisterFeatureGates()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "provision-osc: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.name == "" || o.namespace == "" || o.pool == "" || o.secretName == "" || o.server == "" || o.caFile == "" {
		return fmt.Errorf("--name, --namespace, --pool, --secret-name, --server and --ca-file are required")
	}
	version, err := semver.NewVersion(o.kubernetesVersion)
	if err != nil {
		return fmt.Errorf("--kubernetes-version: %w", err)
	}
	caBundle, err := os.ReadFile(o.caFile)
	if err != nil {
		return err
	}
	image, err := imagevector.Containers().FindImage(
		imagevector.ContainerImageNameGardenerNodeAgent,
		imagevectorutils.RuntimeVersion(version.String()),
		imagevectorutils.TargetVersion(version.String()),
	)
	if err != nil {
		return fmt.Errorf("image vector: %w", err)
	}
	worker := gardencorev1beta1.Worker{
		Name:    o.pool,
		Machine: gardencorev1beta1.Machine{Image: &gardencorev1beta1.ShootMachineImage{Name: o.osType}},
	}

	config := nodeagent.ComponentConfig(o.secretName, version, o.server, nil)
	units, files, err := nodeinit.Config(worker, image.String(), config, caBundle, false)
	if err != nil {
		return fmt.Errorf("nodeinit: %w", err)
	}
	provision := extensionsv1alpha1.OperatingSystemConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: extensionsv1alpha1.SchemeGroupVersion.String(), Kind: "OperatingSystemConfig"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      o.name,
			Namespace: o.namespace,
			Labels:    map[string]string{"worker.gardener.cloud/pool": o.pool},
		},
		Spec: extensionsv1alpha1.OperatingSystemConfigSpec{
			DefaultSpec: extensionsv1alpha1.DefaultSpec{Type: o.osType},
			Purpose:     extensionsv1alpha1.OperatingSystemConfigPurposeProvision,
			Units:       units,
			Files:       files,
		},
	}

	agentUnits, agentFiles, err := nodeagent.New().Config(components.Context{
		Key:               o.secretName,
		CABundle:          string(caBundle),
		KubernetesVersion: version,
		APIServerURL:      o.server,
		Images:            map[string]*imagevectorutils.Image{imagevector.ContainerImageNameGardenerNodeAgent: image},
	})
	if err != nil {
		return fmt.Errorf("gardener-node-agent component: %w", err)
	}

	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"provision": provision,
		"nodeAgent": map[string]any{"units": agentUnits, "files": agentFiles},
		"rbac":      nodeagent.GetCertificateSigningRequestClusterRoleBindings(),
	})
}
