// Command reconcile-osc prints the reconcile OperatingSystemConfig (purpose reconcile,
// `<key>-original`) gardenlet v1.149.3 writes for a worker pool, computed by gardenlet's own
// code rather than a copy of it, so the end-to-end tests' nodes apply what a landscape ships:
// the units and files of `original.Config` — kubelet (unit, configuration, CA, the binary as an
// imageRef file of the hyperkube image), containerd (its log rotation, the unit that restarts
// on CA changes), the kernel settings and systemd-sysctl, journald, the root certificates,
// sshd-ensurer, the gardener-node-agent component, and the log shipper when node logging is
// on — with the components.Context, labels and criConfig that the operatingsystemconfig
// component's deployer gives them (pkg/component/extensions/operatingsystemconfig).
//
// It sits beside provision-osc (which prints the provision OSC and the node agent's part of
// this one): a separate program because the reconcile OSC needs the whole pool and the
// shoot's values (cluster DNS and domain, kubelet CA, kube-proxy, SSH access, node logging),
// none of which the provision content depends on.
//
// Inputs: the pool as the Shoot's `spec.provider.workers[]` entry (JSON: machine image, CRI,
// kubelet configuration, sysctls, update strategy, labels, taints), the node-agent key, the
// Kubernetes version, the API server URL and CA bundles, the cluster DNS addresses and domain.
// Images (hyperkube for the kubelet binary, pause-container for containerd's sandbox image,
// gardener-node-agent) come from gardener's image vector with IMAGEVECTOR_OVERWRITE applied, as
// gardenlet looks them up. Output: the OSC as JSON on stdout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/gardener/gardener/imagevector"
	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/component/extensions/operatingsystemconfig/original"
	"github.com/gardener/gardener/pkg/component/extensions/operatingsystemconfig/original/components"
	gardenletfeatures "github.com/gardener/gardener/pkg/gardenlet/features"
	gardenerutils "github.com/gardener/gardener/pkg/utils/gardener"
	imagevectorutils "github.com/gardener/gardener/pkg/utils/imagevector"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type options struct {
	name, namespace, key      string
	workerJSON                string
	kubernetesVersion         string
	server, caFile, kubeletCA string
	clusterDNS, clusterDomain string
	kubeProxy, sshAccess      bool
	nodeMonitorGracePeriod    time.Duration
	otelIngress, valiIngress  string
	nodeLogging               bool
}

func main() {
	var o options
	flag.StringVar(&o.name, "name", "", "name of the OSC (default <key>-original)")
	flag.StringVar(&o.namespace, "namespace", "", "seed namespace of the shoot")
	flag.StringVar(&o.key, "key", "", "the pool's node-agent key (its Secret in the shoot)")
	flag.StringVar(&o.workerJSON, "worker", "", "the pool: the Shoot's spec.provider.workers[] entry as JSON")
	flag.StringVar(&o.kubernetesVersion, "kubernetes-version", "", "the shoot's Kubernetes version (the pool's own, if set, wins)")
	flag.StringVar(&o.server, "server", "", "the shoot kube-apiserver's URL")
	flag.StringVar(&o.caFile, "ca-file", "", "the CA bundle of the nodes (PEM): the shoot's cluster CA")
	flag.StringVar(&o.kubeletCA, "kubelet-ca-file", "", "the CA kubelet trusts for client certificates (PEM; gardenlet's ca-kubelet)")
	flag.StringVar(&o.clusterDNS, "cluster-dns", "", "the cluster DNS addresses, comma-separated")
	flag.StringVar(&o.clusterDomain, "cluster-domain", gardencorev1beta1.DefaultDomain, "the cluster domain")
	flag.BoolVar(&o.kubeProxy, "kube-proxy", true, "kube-proxy is enabled in the shoot")
	flag.BoolVar(&o.sshAccess, "ssh-access", false, "the shoot's workersSettings.sshAccess.enabled")
	flag.DurationVar(&o.nodeMonitorGracePeriod, "node-monitor-grace-period", 40*time.Second, "kube-controller-manager's nodeMonitorGracePeriod")
	flag.BoolVar(&o.nodeLogging, "node-logging", false, "shoot node logging is on (gardenlet then ships the node's logs)")
	flag.StringVar(&o.otelIngress, "otel-ingress", "", "the OpenTelemetry collector's ingress host (with --node-logging)")
	flag.StringVar(&o.valiIngress, "vali-ingress", "", "the Vali ingress host (with --node-logging)")
	flag.Parse()
	// gardenlet's feature gates at their defaults, as gardenlet registers them at start.
	gardenletfeatures.RegisterFeatureGates()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "reconcile-osc: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.namespace == "" || o.key == "" || o.workerJSON == "" || o.server == "" || o.caFile == "" || o.kubeletCA == "" {
		return fmt.Errorf("--namespace, --key, --worker, --server, --ca-file and --kubelet-ca-file are required")
	}
	var worker gardencorev1beta1.Worker
	if err := json.Unmarshal([]byte(o.workerJSON), &worker); err != nil {
		return fmt.Errorf("--worker: %w", err)
	}
	shootVersion, err := semver.NewVersion(o.kubernetesVersion)
	if err != nil {
		return fmt.Errorf("--kubernetes-version: %w", err)
	}
	version, err := v1beta1helper.CalculateEffectiveKubernetesVersion(shootVersion, worker.Kubernetes)
	if err != nil {
		return err
	}
	caBundle, err := os.ReadFile(o.caFile)
	if err != nil {
		return err
	}
	kubeletCA, err := os.ReadFile(o.kubeletCA)
	if err != nil {
		return err
	}

	images, err := findImages(version)
	if err != nil {
		return err
	}

	criName := extensionsv1alpha1.CRINameContainerD
	if worker.CRI != nil {
		criName = extensionsv1alpha1.CRIName(worker.CRI.Name)
	}
	var kubelet *gardencorev1beta1.KubeletConfig
	if worker.Kubernetes != nil {
		kubelet = worker.Kubernetes.Kubelet
	}
	var clusterDNS []string
	for address := range strings.SplitSeq(o.clusterDNS, ",") {
		if address = strings.TrimSpace(address); address != "" {
			clusterDNS = append(clusterDNS, address)
		}
	}

	context := components.Context{
		Key:                                     o.key,
		CABundle:                                string(caBundle),
		ClusterDNSAddresses:                     clusterDNS,
		ClusterDomain:                           o.clusterDomain,
		CRIName:                                 criName,
		Images:                                  images,
		NodeLabels:                              gardenerutils.NodeLabelsForWorkerPool(worker, false, o.key, ""),
		NodeMonitorGracePeriod:                  metav1.Duration{Duration: o.nodeMonitorGracePeriod},
		KubeletCABundle:                         kubeletCA,
		KubeletConfigParameters:                 components.KubeletConfigParametersFromCoreV1beta1KubeletConfig(kubelet),
		KubeletCLIFlags:                         components.KubeletCLIFlagsFromCoreV1beta1KubeletConfig(kubelet),
		KubeletDataVolumeName:                   worker.KubeletDataVolumeName,
		KubeProxyEnabled:                        o.kubeProxy,
		KubernetesVersion:                       version,
		SSHAccessEnabled:                        o.sshAccess,
		ValitailEnabled:                         o.nodeLogging,
		ValiIngress:                             o.valiIngress,
		OpenTelemetryCollectorLogShipperEnabled: o.nodeLogging,
		OpenTelemetryCollectorIngressHostName:   o.otelIngress,
		APIServerURL:                            o.server,
		Sysctls:                                 worker.Sysctls,
		Taints:                                  slices.Clone(worker.Taints),
	}
	units, files, err := original.Config(context)
	if err != nil {
		return fmt.Errorf("original components: %w", err)
	}

	name := o.name
	if name == "" {
		name = o.key + "-original"
	}
	osc := extensionsv1alpha1.OperatingSystemConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: extensionsv1alpha1.SchemeGroupVersion.String(), Kind: "OperatingSystemConfig"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: o.namespace,
			Labels: map[string]string{
				v1beta1constants.LabelWorkerPool:                                    worker.Name,
				v1beta1constants.LabelExtensionProviderMutatedByControlplaneWebhook: "true",
			},
		},
		Spec: extensionsv1alpha1.OperatingSystemConfigSpec{
			Purpose: extensionsv1alpha1.OperatingSystemConfigPurposeReconcile,
			Units:   units,
			Files:   files,
		},
	}
	// What gardenlet's deployer sets beside the components' units and files.
	if image := worker.Machine.Image; image != nil {
		osc.Spec.Type = image.Name
		osc.Spec.ProviderConfig = image.ProviderConfig
	}
	if v1beta1helper.IsUpdateStrategyInPlace(worker.UpdateStrategy) {
		osc.Spec.InPlaceUpdates = &extensionsv1alpha1.InPlaceUpdates{KubeletVersion: version.String()}
		if image := worker.Machine.Image; image != nil && image.Version != nil {
			osc.Spec.InPlaceUpdates.OperatingSystemVersion = *image.Version
		}
	}
	if worker.CRI != nil {
		osc.Spec.CRIConfig = &extensionsv1alpha1.CRIConfig{Name: extensionsv1alpha1.CRIName(worker.CRI.Name)}
		if osc.Spec.CRIConfig.Name == extensionsv1alpha1.CRINameContainerD {
			systemd := extensionsv1alpha1.CgroupDriverSystemd
			osc.Spec.CRIConfig.CgroupDriver = &systemd
			osc.Spec.CRIConfig.Containerd = &extensionsv1alpha1.ContainerdConfig{}
			if pause := images[imagevector.ContainerImageNamePauseContainer]; pause != nil {
				osc.Spec.CRIConfig.Containerd.SandboxImage = pause.String()
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(osc)
}

// findImages looks the OSC's images up as gardenlet does for version: the pause container and
// the log shippers for the shoot's version, gardener-node-agent, and hyperkube (the kubelet
// binary) for the pool's version.
func findImages(version *semver.Version) (map[string]*imagevectorutils.Image, error) {
	options := []imagevectorutils.FindOptionFunc{
		imagevectorutils.RuntimeVersion(version.String()),
		imagevectorutils.TargetVersion(version.String()),
	}
	images, err := imagevectorutils.FindImages(imagevector.Containers(), []string{
		imagevector.ContainerImageNamePauseContainer,
		imagevector.ContainerImageNameValitail,
		imagevector.ContainerImageNameOpentelemetryCollector,
	}, options...)
	if err != nil {
		return nil, fmt.Errorf("image vector: %w", err)
	}
	found := make(map[string]*imagevectorutils.Image, len(images)+2)
	maps.Copy(found, images)
	for _, name := range []string{imagevector.ContainerImageNameGardenerNodeAgent, imagevector.ContainerImageNameHyperkube} {
		image, err := imagevector.Containers().FindImage(name, options...)
		if err != nil {
			return nil, fmt.Errorf("image vector: %s: %w", name, err)
		}
		found[name] = image
	}
	return found, nil
}
