package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	apiv1alpha1 "github.com/gardener/gardener/pkg/provider-local/machine-provider/api/v1alpha1"
	"github.com/gardener/gardener/pkg/provider-local/machine-provider/api/validation"
	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// The states of a machine in the node cloud.
const (
	stateBooting = "booting"
	stateRunning = "running"
	stateFailed  = "failed"
)

// createPollInterval is how often a blocking create asks the node cloud whether its machine
// runs (provider-local polls its machine Pod every 5 s).
const createPollInterval = 5 * time.Second

// nspawnDriver is the driver.Driver of the provider: every call is one request to the node
// cloud, except a blocking create (createWait > 0), which polls it. See the package comment
// for the API and for what MCM does with each answer.
type nspawnDriver struct {
	cloud *nodeCloud
	// createWait > 0 makes CreateMachine block as provider-local's does: until the node cloud
	// reports the machine running, at most this long.
	createWait time.Duration
}

var _ driver.Driver = (*nspawnDriver)(nil)

// cloudMachine is one machine as the node cloud reports it.
type cloudMachine struct {
	Name       string `json:"name,omitempty"` // only in lists
	ProviderID string `json:"providerID"`
	NodeName   string `json:"nodeName"`
	State      string `json:"state"`
	Error      string `json:"error,omitempty"`
}

// CreateMachine asks the node cloud for the machine and returns at once: the boot goes on in
// the background, MCM waits for the Node. With --create-wait-until-running it blocks until
// the machine runs instead (see waitUntilRunning).
func (d *nspawnDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if err := validateClass(req.MachineClass, req.Secret); err != nil {
		return nil, err
	}
	body := struct {
		Class        string          `json:"class"`
		UserData     []byte          `json:"userData"` // encoding/json writes base64
		ProviderSpec json.RawMessage `json:"providerSpec"`
	}{req.MachineClass.Name, req.Secret.Data["userData"], req.MachineClass.ProviderSpec.Raw}
	var m cloudMachine
	if err := d.cloud.call(ctx, http.MethodPut, machinePath(req.Machine.Name), nil, body, &m); err != nil {
		if errors.Is(err, errNotFound) { // a 404 is a 4xx like any other here
			return nil, fail(codes.InvalidArgument, "node cloud refused machine %q: %v", req.Machine.Name, err)
		}
		return nil, err
	}
	if err := checkMachine(req.Machine.Name, &m); err != nil {
		return nil, err
	}
	klog.V(2).Infof("node cloud: machine %q is %s (providerID %q)", req.Machine.Name, m.State, m.ProviderID)
	if d.createWait > 0 && m.State == stateBooting {
		if err := d.waitUntilRunning(ctx, req.Machine.Name, &m); err != nil {
			return nil, err
		}
	}
	if m.State == stateFailed {
		return nil, failedMachine(req.Machine.Name, &m)
	}
	return &driver.CreateMachineResponse{ProviderID: m.ProviderID, NodeName: m.NodeName}, nil
}

// waitUntilRunning is provider-local's waitForPodToBeRunning for the node cloud: it asks for
// the machine every createPollInterval (at once first) until the cloud reports it running or
// failed, for at most createWait. The time-out and a machine that vanished are
// DeadlineExceeded, as provider-local returns them (MCM retries the create in 5 s); a cloud
// that cannot be asked ends the wait with its error.
func (d *nspawnDriver) waitUntilRunning(ctx context.Context, name string, m *cloudMachine) error {
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d.createWait)
	defer cancel()
	ticker := time.NewTicker(createPollInterval)
	defer ticker.Stop()
	for {
		if err := d.cloud.call(ctx, http.MethodGet, machinePath(name), nil, nil, m); err != nil {
			switch {
			case ctx.Err() != nil:
				return fail(codes.DeadlineExceeded, "machine %q is still %s in the node cloud after %s, failed waiting for it to run", name, m.State, d.createWait)
			case errors.Is(err, errNotFound):
				return fail(codes.DeadlineExceeded, "machine %q vanished from the node cloud while waiting for it to run", name)
			default:
				return err
			}
		}
		if err := checkMachine(name, m); err != nil {
			return err
		}
		if m.State != stateBooting {
			klog.V(2).Infof("node cloud: machine %q is %s after a blocking create of %s", name, m.State, time.Since(started).Round(time.Second))
			return nil
		}
		select {
		case <-ctx.Done():
			return fail(codes.DeadlineExceeded, "machine %q is still %s in the node cloud after %s, failed waiting for it to run", name, m.State, d.createWait)
		case <-ticker.C:
		}
	}
}

// GetMachineStatus reports the machine, NotFound when the node cloud has none, and a failed
// machine as Aborted, except while the Machine is being deleted (see the package comment).
func (d *nspawnDriver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	if err := checkProvider(req.MachineClass); err != nil {
		return nil, err
	}
	var m cloudMachine
	if err := d.cloud.call(ctx, http.MethodGet, machinePath(req.Machine.Name), nil, nil, &m); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, fail(codes.NotFound, "node cloud has no machine %q", req.Machine.Name)
		}
		return nil, err
	}
	if err := checkMachine(req.Machine.Name, &m); err != nil {
		return nil, err
	}
	if m.State == stateFailed && req.Machine.DeletionTimestamp == nil {
		return nil, failedMachine(req.Machine.Name, &m)
	}
	return &driver.GetMachineStatusResponse{ProviderID: m.ProviderID, NodeName: m.NodeName}, nil
}

// DeleteMachine powers the machine off; one that is already gone is deleted too.
func (d *nspawnDriver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if err := checkProvider(req.MachineClass); err != nil {
		return nil, err
	}
	err := d.cloud.call(ctx, http.MethodDelete, machinePath(req.Machine.Name), nil, nil, nil)
	if err != nil && !errors.Is(err, errNotFound) {
		return nil, err
	}
	klog.V(2).Infof("node cloud: machine %q deleted", req.Machine.Name)
	return &driver.DeleteMachineResponse{}, nil
}

// ListMachines returns the class's machines as providerID → machine name.
func (d *nspawnDriver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	if err := checkProvider(req.MachineClass); err != nil {
		return nil, err
	}
	var list []cloudMachine
	err := d.cloud.call(ctx, http.MethodGet, "machines", url.Values{"class": {req.MachineClass.Name}}, nil, &list)
	if errors.Is(err, errNotFound) {
		return nil, fail(codes.Internal, "node cloud does not list machines: %v", err)
	} else if err != nil {
		return nil, err
	}
	machines := make(map[string]string, len(list))
	for i := range list {
		if list[i].Name == "" || list[i].ProviderID == "" {
			return nil, fail(codes.Internal, "node cloud listed a machine without name or providerID: %+v", list[i])
		}
		machines[list[i].ProviderID] = list[i].Name
	}
	return &driver.ListMachinesResponse{MachineList: machines}, nil
}

// GetVolumeIDs: the machines have no volumes of a cloud.
func (d *nspawnDriver) GetVolumeIDs(context.Context, *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	return &driver.GetVolumeIDsResponse{}, nil
}

// InitializeMachine: nothing to initialise after the create, which MCM reads from Unimplemented.
func (d *nspawnDriver) InitializeMachine(context.Context, *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	return nil, fail(codes.Unimplemented, "the nspawn provider has no machine initialisation")
}

// GenerateMachineClassForMigration is no longer part of driver.Driver in MCM v0.62.1 (nothing
// calls it); kept, empty, like provider-local's.
func (d *nspawnDriver) GenerateMachineClassForMigration(context.Context, *driver.GenerateMachineClassForMigrationRequest) (*driver.GenerateMachineClassForMigrationResponse, error) {
	return &driver.GenerateMachineClassForMigrationResponse{}, nil
}

func checkProvider(class *v1alpha1.MachineClass) error {
	if class == nil {
		return fail(codes.Internal, "request without MachineClass")
	}
	if class.Provider != apiv1alpha1.Provider {
		return fail(codes.InvalidArgument, "MachineClass %q is for provider %q, this one serves %q", class.Name, class.Provider, apiv1alpha1.Provider)
	}
	return nil
}

// validateClass decodes the providerSpec strictly into provider-local's type (no unknown
// fields, no trailing data) and validates it and the secret with provider-local's validation.
func validateClass(class *v1alpha1.MachineClass, secret *corev1.Secret) error {
	if err := checkProvider(class); err != nil {
		return err
	}
	if len(class.ProviderSpec.Raw) == 0 {
		return fail(codes.InvalidArgument, "MachineClass %q has no providerSpec", class.Name)
	}
	var spec apiv1alpha1.ProviderSpec
	dec := json.NewDecoder(bytes.NewReader(class.ProviderSpec.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return fail(codes.InvalidArgument, "providerSpec of MachineClass %q: %v", class.Name, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(codes.InvalidArgument, "providerSpec of MachineClass %q: data after the object", class.Name)
	}
	if errs := validation.ValidateProviderSpec(&spec, secret, field.NewPath("providerSpec")); len(errs) > 0 {
		return fail(codes.InvalidArgument, "MachineClass %q: %v", class.Name, errs.ToAggregate())
	}
	return nil
}

// checkMachine holds a machine reply to the API: a known state and the names MCM stores.
func checkMachine(name string, m *cloudMachine) error {
	switch m.State {
	case stateBooting, stateRunning, stateFailed:
	default:
		return fail(codes.Internal, "node cloud reports machine %q in unknown state %q", name, m.State)
	}
	if m.ProviderID == "" || m.NodeName == "" {
		return fail(codes.Internal, "node cloud reports machine %q without providerID or nodeName", name)
	}
	return nil
}

func failedMachine(name string, m *cloudMachine) error {
	reason := m.Error
	if reason == "" {
		reason = "no reason given"
	}
	return fail(codes.Aborted, "machine %q failed in the node cloud: %s", name, reason)
}

// fail is a status error whose message keeps MCM's parse of the error text intact.
func fail(code codes.Code, format string, args ...any) error {
	msg := strings.NewReplacer("[", "(", "]", ")").Replace(fmt.Sprintf(format, args...))
	return status.Error(code, msg)
}

func machinePath(name string) string {
	return "machines/" + url.PathEscape(name)
}

// nodeCloud is the HTTP client of the node cloud.
type nodeCloud struct {
	base   *url.URL
	client *http.Client
}

// errNotFound is a 404 of the node cloud; each operation decides what it means.
var errNotFound = errors.New("404 Not Found")

func newNodeCloud(raw string) (*nodeCloud, error) {
	if raw == "" {
		return nil, errors.New("no node cloud: pass --node-cloud-url (or set NODE_CLOUD_URL) to the test harness's node cloud, e.g. http://127.0.0.1:4711")
	}
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("--node-cloud-url %q is not an http(s) URL", raw)
	}
	if base.Path == "" {
		base.Path = "/"
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // the node cloud is on loopback
	return &nodeCloud{base: base, client: &http.Client{Transport: transport, Timeout: 30 * time.Second}}, nil
}

// call sends one request and decodes a 2xx reply into out (if not nil). A 404 comes back as
// errNotFound (wrapped with the cloud's sentence); other failures as MCM status errors: a 4xx
// InvalidArgument, a 5xx or no answer Unavailable, an unreadable reply Internal.
func (c *nodeCloud) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	target := c.base.JoinPath(path)
	target.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fail(codes.Internal, "encoding the request to the node cloud: %v", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, target.String(), body)
	if err != nil {
		return fail(codes.Internal, "request to the node cloud: %v", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fail(codes.Unavailable, "node cloud: %v", err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fail(codes.Unavailable, "node cloud: %s %s: reading the reply: %v", method, target.Path, err)
	}
	klog.V(4).Infof("node cloud: %s %s: %s", method, target, resp.Status)

	if resp.StatusCode >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(reply, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(reply))
		}
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%w: %s", errNotFound, e.Error)
		case resp.StatusCode < 500:
			return fail(codes.InvalidArgument, "node cloud: %s %s: %s: %s", method, target.Path, resp.Status, e.Error)
		default:
			return fail(codes.Unavailable, "node cloud: %s %s: %s: %s", method, target.Path, resp.Status, e.Error)
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fail(codes.Internal, "node cloud: %s %s: unexpected %s", method, target.Path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(reply, out); err != nil {
			return fail(codes.Internal, "node cloud: %s %s: unreadable reply: %v", method, target.Path, err)
		}
	}
	return nil
}
