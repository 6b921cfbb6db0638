// Command machine-state runs gardener v1.149.3's own code for the machine state of a
// control-plane migration, so the tests compare our Worker controller with what gardenlet and
// gardener's extensions library really write and read (not with our reading of them):
//
//   - "record": what gardenlet persists on the source seed. shootstate.Deploy
//     (pkg/utils/gardener/shootstate) computes the ShootState from the seed namespace — the
//     machine state from its MachineDeployments, MachineSets and Machines, gzip-compressed,
//     beside any extension state — and writes it into a garden client (here an in-memory
//     one: the ShootState never leaves this program). Then gardenlet's restore on the
//     destination seed, extensions.RestoreExtensionObjectState (pkg/extensions), writes it
//     into a Worker created in the destination namespace (also in memory), which is where
//     RestoreWorkerState puts the machine state with the namespaces rewritten. Output:
//     {"shootState": <ShootState>, "machineState": <its machine-state data>,
//     "workerState": <the Worker's status.state>}; the last two are null when nothing is
//     recorded.
//   - "restore": what the generic Worker actuator of gardener's extensions library does with
//     a Worker's status.state on restore (with --from-shoot-state the file holds the
//     ShootState's machine-state data instead, which gardenlet's RestoreWorkerState first
//     moves into the Worker of --namespace, as on a destination seed):
//     genericactuator.RestoreWithoutReconcile against the
//     seed, for the wanted MachineDeployments given with --deployment (what a provider's
//     worker delegate would generate; machine classes are not deployed). It creates the
//     recorded MachineSets and Machines and the MachineDeployments with the recorded replicas,
//     and scales an existing machine-controller-manager to 1. Output: {"machineDeployments":
//     [...], "machineSets": [...], "machines": [...]} as listed from the namespace afterwards.
//   - "decode": shootstate.UnmarshalMachineState of a status.state (or ShootState machine
//     state) file, printed as gardener's types encode it: what the restore would recreate.
//
// The seed is reached through --kubeconfig; kinds of extension objects whose CRDs the seed
// does not have count as having no objects (a test API server installs only some of them).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	extensionscontroller "github.com/gardener/gardener/extensions/pkg/controller"
	extensionsworkercontroller "github.com/gardener/gardener/extensions/pkg/controller/worker"
	"github.com/gardener/gardener/extensions/pkg/controller/worker/genericactuator"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"
	"github.com/gardener/gardener/pkg/utils/gardener/shootstate"
	machinev1alpha1 "github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const usage = `usage:
  machine-state record  --kubeconfig FILE --namespace NS [--worker-namespace NS] [--worker NAME]
                        [--shoot-name NAME] [--shoot-namespace NS]
  machine-state restore --kubeconfig FILE --namespace NS --state-file FILE [--from-shoot-state]
                        [--worker NAME] [--pool POOL] --deployment NAME=CLASS...
  machine-state decode  --state-file FILE`

// deployments collects repeated --deployment NAME=CLASS flags.
type deployments []extensionsworkercontroller.MachineDeployment

func (d *deployments) String() string { return fmt.Sprint(len(*d)) }

func (d *deployments) Set(value string) error {
	name, class, ok := strings.Cut(value, "=")
	if !ok || name == "" || class == "" {
		return fmt.Errorf("want NAME=CLASS, got %q", value)
	}
	*d = append(*d, extensionsworkercontroller.MachineDeployment{Name: name, ClassName: class})
	return nil
}

type options struct {
	kubeconfig, namespace, workerNamespace, worker string
	shootName, shootNamespace, stateFile, pool     string
	wanted                                         deployments
	fromShootState                                 bool
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	command := os.Args[1]
	var o options
	flags := flag.NewFlagSet(command, flag.ExitOnError)
	flags.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the seed")
	flags.StringVar(&o.namespace, "namespace", "", "the shoot's namespace in the seed (record: source; restore: destination)")
	flags.StringVar(&o.workerNamespace, "worker-namespace", "", "record: the destination namespace of the Worker (default: --namespace)")
	flags.StringVar(&o.worker, "worker", "worker", "name of the Worker")
	flags.StringVar(&o.shootName, "shoot-name", "shoot", "record: the Shoot the ShootState belongs to")
	flags.StringVar(&o.shootNamespace, "shoot-namespace", "garden-project", "record: the Shoot's project namespace")
	flags.StringVar(&o.stateFile, "state-file", "", "restore, decode: file with the state (the Worker's status.state)")
	flags.StringVar(&o.pool, "pool", "", "restore: worker pool of the wanted deployments")
	flags.BoolVar(&o.fromShootState, "from-shoot-state", false, "restore: the state file is the ShootState's machine-state data, not the Worker's status.state")
	flags.Var(&o.wanted, "deployment", "restore: a wanted MachineDeployment, NAME=CLASS (repeatable)")
	_ = flags.Parse(os.Args[2:])

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		out any
		err error
	)
	switch command {
	case "record":
		out, err = record(ctx, o)
	case "restore":
		out, err = restore(ctx, o)
	case "decode":
		out, err = decode(o)
	default:
		err = fmt.Errorf("unknown command %q\n%s", command, usage)
	}
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(out)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "machine-state %s: %v\n", command, err)
		os.Exit(1)
	}
}

func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(gardencorev1beta1.AddToScheme(scheme))
	utilruntime.Must(extensionsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(machinev1alpha1.AddToScheme(scheme))
	return scheme
}

func seedClient(o options, scheme *runtime.Scheme) (client.Client, error) {
	if o.kubeconfig == "" || o.namespace == "" {
		return nil, errors.New("--kubeconfig and --namespace are required")
	}
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := client.New(config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return withoutMissingExtensionKinds{Client: c, scheme: scheme}, nil
}

// withoutMissingExtensionKinds answers a list of extension objects whose CRD the API server
// lacks with an empty list; every other call, and every other error, goes through unchanged.
type withoutMissingExtensionKinds struct {
	client.Client
	scheme *runtime.Scheme
}

func (c withoutMissingExtensionKinds) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := c.Client.List(ctx, list, opts...)
	if err == nil || !meta.IsNoMatchError(err) {
		return err
	}
	gvk, gvkErr := apiutil.GVKForObject(list, c.scheme)
	if gvkErr == nil && gvk.Group == extensionsv1alpha1.SchemeGroupVersion.Group {
		return nil
	}
	return err
}

func logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, "machine-state:", prefix, args)
	}, funcr.Options{})
}

// rawOrNil is raw JSON for the output, null when empty.
func rawOrNil(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func record(ctx context.Context, o options) (any, error) {
	scheme := newScheme()
	seed, err := seedClient(o, scheme)
	if err != nil {
		return nil, err
	}
	garden := fake.NewClientBuilder().WithScheme(scheme).Build()
	shoot := &gardencorev1beta1.Shoot{ObjectMeta: metav1.ObjectMeta{Name: o.shootName, Namespace: o.shootNamespace}}
	if err := shootstate.Deploy(ctx, clock.RealClock{}, garden, seed, shoot, o.namespace, true); err != nil {
		return nil, err
	}
	shootState := &gardencorev1beta1.ShootState{}
	if err := garden.Get(ctx, client.ObjectKeyFromObject(shoot), shootState); err != nil {
		return nil, err
	}
	var machineState []byte
	for _, data := range shootState.Spec.Gardener {
		if data.Name == v1beta1constants.DataTypeMachineState && data.Type == v1beta1constants.DataTypeMachineState {
			machineState = data.Data.Raw
		}
	}

	// The destination: gardenlet creates the Worker (waiting for its state) and restores the
	// state into it before it asks for restore.
	workerNamespace := o.workerNamespace
	if workerNamespace == "" {
		workerNamespace = o.namespace
	}
	worker := &extensionsv1alpha1.Worker{ObjectMeta: metav1.ObjectMeta{Name: o.worker, Namespace: workerNamespace}}
	destination := fake.NewClientBuilder().WithScheme(scheme).WithObjects(worker).WithStatusSubresource(worker).Build()
	if err := extensions.RestoreExtensionObjectState(ctx, destination, shootState, worker, extensionsv1alpha1.WorkerResource); err != nil {
		return nil, err
	}
	if err := destination.Get(ctx, client.ObjectKeyFromObject(worker), worker); err != nil {
		return nil, err
	}
	var workerState []byte
	if worker.Status.State != nil {
		workerState = worker.Status.State.Raw
	}
	return map[string]any{
		"shootState":   shootState,
		"machineState": rawOrNil(machineState),
		"workerState":  rawOrNil(workerState),
	}, nil
}

// delegate is the provider's part of the generic actuator as far as restore needs it: the
// wanted MachineDeployments; machine classes are the caller's.
type delegate struct {
	genericactuator.WorkerDelegate
	wanted extensionsworkercontroller.MachineDeployments
}

func (d delegate) DeployMachineClasses(context.Context) error { return nil }

func (d delegate) GenerateMachineDeployments(context.Context) (extensionsworkercontroller.MachineDeployments, error) {
	return d.wanted, nil
}

type delegateFactory struct{ delegate delegate }

func (f delegateFactory) WorkerDelegate(context.Context, *extensionsv1alpha1.Worker, *extensionscontroller.Cluster) (genericactuator.WorkerDelegate, error) {
	return f.delegate, nil
}

func readState(o options) ([]byte, error) {
	if o.stateFile == "" {
		return nil, errors.New("--state-file is required")
	}
	return os.ReadFile(o.stateFile)
}

func restore(ctx context.Context, o options) (any, error) {
	if len(o.wanted) == 0 {
		return nil, errors.New("at least one --deployment NAME=CLASS is required")
	}
	state, err := readState(o)
	if err != nil {
		return nil, err
	}
	scheme := newScheme()
	seed, err := seedClient(o, scheme)
	if err != nil {
		return nil, err
	}
	wanted := make(extensionsworkercontroller.MachineDeployments, 0, len(o.wanted))
	for _, deployment := range o.wanted {
		deployment.PoolName = o.pool
		wanted = append(wanted, deployment)
	}
	worker := &extensionsv1alpha1.Worker{ObjectMeta: metav1.ObjectMeta{Name: o.worker, Namespace: o.namespace}}
	if o.fromShootState {
		if err := restoreWorkerState(ctx, scheme, worker, state); err != nil {
			return nil, err
		}
	} else {
		worker.Status.State = &runtime.RawExtension{Raw: state}
	}
	cluster := &extensionscontroller.Cluster{Shoot: &gardencorev1beta1.Shoot{}}
	factory := delegateFactory{delegate: delegate{wanted: wanted}}
	if err := genericactuator.RestoreWithoutReconcile(ctx, logger(), nil, seed, factory, worker, cluster); err != nil {
		return nil, err
	}

	deploymentList := &machinev1alpha1.MachineDeploymentList{}
	setList := &machinev1alpha1.MachineSetList{}
	machineList := &machinev1alpha1.MachineList{}
	for _, list := range []client.ObjectList{deploymentList, setList, machineList} {
		if err := seed.List(ctx, list, client.InNamespace(o.namespace)); err != nil {
			return nil, err
		}
	}
	return map[string]any{
		"machineDeployments": deploymentList.Items,
		"machineSets":        setList.Items,
		"machines":           machineList.Items,
	}, nil
}

// restoreWorkerState is gardenlet's step on the destination seed: the ShootState's machine
// state into the (in-memory) Worker's status.state, namespaces rewritten to the Worker's.
func restoreWorkerState(ctx context.Context, scheme *runtime.Scheme, worker *extensionsv1alpha1.Worker, machineState []byte) error {
	shootState := &gardencorev1beta1.ShootState{Spec: gardencorev1beta1.ShootStateSpec{
		Gardener: []gardencorev1beta1.GardenerResourceData{{
			Name: v1beta1constants.DataTypeMachineState,
			Type: v1beta1constants.DataTypeMachineState,
			Data: runtime.RawExtension{Raw: machineState},
		}},
	}}
	destination := fake.NewClientBuilder().WithScheme(scheme).WithObjects(worker).WithStatusSubresource(worker).Build()
	if err := extensions.RestoreWorkerState(ctx, destination, shootState, worker); err != nil {
		return err
	}
	return destination.Get(ctx, client.ObjectKeyFromObject(worker), worker)
}

func decode(o options) (any, error) {
	state, err := readState(o)
	if err != nil {
		return nil, err
	}
	return shootstate.UnmarshalMachineState(state)
}
