// Command machine-provider-nspawn is a machine-controller-manager (MCM) provider for the
// end-to-end tests: MCM v0.62.1's provider framework (the machine, machine class, secret and
// node controllers of pkg/util/provider) with a driver whose "cloud" is the loopback HTTP node
// cloud the Rust test harness runs. The harness boots each machine as a systemd-nspawn
// container from the user data it is given; this driver only talks to it.
//
// It serves MachineClasses of provider "local" and reads exactly provider-local's providerSpec
// (gardener v1.149.3, pkg/provider-local/machine-provider/api/v1alpha1.ProviderSpec: "image"
// required, "namespace", "ipPoolNameV4", "ipPoolNameV6", nothing else) and its secret
// validation ("userData" required), so the MachineClasses provider-local's Worker controller
// writes are driven unchanged; the fields are passed on to the node cloud, not interpreted.
//
// # Flags
//
// All of MCM's provider flags (--control-kubeconfig, --target-kubeconfig, --namespace, --port,
// --machine-creation-timeout, --leader-elect, ...), plus
//
//	--node-cloud-url   base URL of the node cloud, e.g. http://127.0.0.1:4711 (fallback: the
//	                   NODE_CLOUD_URL environment variable); the provider refuses to start
//	                   without one.
//	--create-wait-until-running
//	                   0 (the default): CreateMachine returns as soon as the node cloud has
//	                   accepted the machine. A duration (provider-local: 10m): CreateMachine
//	                   blocks as provider-local's does (gardener v1.149.3,
//	                   pkg/provider-local/machine-provider/local/create_machine.go,
//	                   waitForPodToBeRunning): it asks the node cloud every 5 s until the machine
//	                   is running, for at most that long, and then answers; the time-out is
//	                   DeadlineExceeded. MCM holds the Machine's deletion while a create runs
//	                   ("machine ... is in creation flow. Deletion cannot proceed").
//
// # Node cloud API
//
// JSON over HTTP; {name} is the Machine's name. Every 4xx and 5xx reply carries
// {"error": "<sentence>"}.
//
//	PUT /machines/{name}
//	    body {"class": "<MachineClass name>", "userData": "<base64 of the class secret's
//	    userData, MCM's placeholders already replaced>", "providerSpec": <the MachineClass's
//	    providerSpec, raw>}
//	    200 or 201 with a machine: {"providerID": "nspawn:///<name>", "nodeName": "<name>",
//	    "state": "booting" | "running" | "failed", "error": "<sentence>" (with "failed")}.
//	    Answers at once, the boot runs on: "running" once the machine is up (its user data
//	    runs from then on, as a machine Pod of provider-local is Running before its node joins),
//	    "failed" when it did not come up or its user data failed. Idempotent: a PUT of an
//	    existing machine returns it unchanged.
//	GET /machines/{name}
//	    200 with the machine, or 404.
//	DELETE /machines/{name}
//	    204: powered off and forgotten; 404: already gone (success for the driver too).
//	GET /machines?class=<MachineClass name>
//	    200 with [{"name": "...", "providerID": "...", "nodeName": "...", "state": "..."}].
//
// The node's hostname, and so its Node name, is the machine name: NodeName = machine name,
// ProviderID = nspawn:///<machine name>.
//
// # What MCM v0.62.1 does with the driver's answers
//
// From pkg/util/provider/machinecontroller (machine.go, machine_util.go, machine_safety.go):
//
//   - The creation flow runs while a Machine has no providerID or its phase is "" or
//     CrashLoopBackOff. It first calls GetMachineStatus: NotFound (or Unimplemented) leads to
//     CreateMachine when the Machine has no providerID yet (else MCM keeps the one it has);
//     Uninitialized leads to InitializeMachine; success adopts the answer. After a successful CreateMachine MCM
//     stores providerID and the node label, calls InitializeMachine (Unimplemented means
//     "nothing to initialise", anything else fails the creation), and on the next pass (5 s)
//     GetMachineStatus again, then sets the phase to Pending. From Pending on MCM watches the
//     Node only and does not call GetMachineStatus again: a boot that fails later shows as
//     "failed to join the cluster" once the creation timeout has passed.
//   - Any other error of GetMachineStatus or CreateMachine sets LastOperation
//     {State: Failed, Type: Create, ErrorCode: <code>, Description: "Cloud provider
//     message - machine codes error: code = [<code>] message = [<sentence>]"} and the phase
//     CrashLoopBackOff, or Failed once the Machine is older than its creation timeout
//     (--machine-creation-timeout, 20m by default; no code fails it earlier). The code only
//     picks the retry: Unknown, DeadlineExceeded, Aborted and Unavailable 5 s;
//     ResourceExhausted --resource-exhausted-retry (10 min); every other code 3 min. MCM
//     core's MachineSet controller then replaces a Failed Machine.
//   - So a machine the node cloud reports "failed" is Aborted with the cloud's sentence, from
//     GetMachineStatus and from CreateMachine (an idempotent PUT may return it): the Machine
//     shows the message at once, is re-checked every 5 s, and turns Failed at its creation
//     timeout. Not while the Machine is being deleted: the deletion flow calls
//     GetMachineStatus for the node name when the Machine has no node label, and an error
//     there would hold the deletion in that step for good, so a deleting Machine gets the
//     failed machine's providerID and node name.
//   - Deletion: DeleteMachine success or NotFound moves on to the Node's deletion. Unknown,
//     DeadlineExceeded, Aborted and Unavailable retry in 5 s, every other code in 10 min.
//   - The safety controller lists each class's machines (ListMachines, providerID → machine
//     name) every --machine-safety-orphan-vms-period and deletes those no Machine owns.
//   - Codes here: a 4xx of the node cloud is InvalidArgument with its sentence, as are a
//     class of another provider and an invalid providerSpec or secret; a node cloud that
//     cannot be reached or answers 5xx is Unavailable (short retries everywhere); a reply
//     that breaks the API above is Internal.
//   - GetVolumeIDs (asked by the drain for each PV) answers none; InitializeMachine is
//     Unimplemented.
//
// MCM parses a status error back out of its text ("code = [...] message = [...]"), so square
// brackets in a message would garble the code; the driver writes them as parentheses.
package main

import (
	"fmt"
	"os"

	_ "github.com/gardener/machine-controller-manager/pkg/util/client/metrics/prometheus" // client metrics
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app/options"
	_ "github.com/gardener/machine-controller-manager/pkg/util/reflector/prometheus" // reflector metrics
	_ "github.com/gardener/machine-controller-manager/pkg/util/workqueue/prometheus" // workqueue metrics
	"github.com/spf13/pflag"
	"k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
)

func main() {
	s := options.NewMCServer()
	s.AddFlags(pflag.CommandLine)
	cloudURL := pflag.CommandLine.String("node-cloud-url", "",
		"Base URL of the test harness's node cloud, e.g. http://127.0.0.1:4711 (default: $NODE_CLOUD_URL)")
	createWait := pflag.CommandLine.Duration("create-wait-until-running", 0,
		"Block CreateMachine until the node cloud reports the machine running, at most this long (provider-local's blocking create: 10m); 0 returns at once")

	flag.InitFlags()
	logs.InitLogs()
	defer logs.FlushLogs()

	if *cloudURL == "" {
		*cloudURL = os.Getenv("NODE_CLOUD_URL")
	}
	cloud, err := newNodeCloud(*cloudURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "machine-provider-nspawn: %v\n", err)
		os.Exit(2)
	}

	if *createWait < 0 {
		fmt.Fprintf(os.Stderr, "machine-provider-nspawn: --create-wait-until-running %s is negative\n", *createWait)
		os.Exit(2)
	}

	if err := app.Run(s, &nspawnDriver{cloud: cloud, createWait: *createWait}); err != nil {
		fmt.Fprintf(os.Stderr, "machine-provider-nspawn: %v\n", err)
		os.Exit(1)
	}
}
