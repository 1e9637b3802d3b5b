package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// rendered are the objects a render of the chart made, by kind and name.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	daemonSets  map[string]*appsv1.DaemonSet
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
}

// render renders deploy/helm/cove with values as `helm install cove -n
// sandboxes` would, and decodes every object strictly: a field Kubernetes
// does not know fails the test.
func render(t *testing.T, values map[string]any) (rendered, error) {
	t.Helper()
	ch, err := loader.Load(filepath.Join(repoRoot(t), "deploy", "helm", "cove"))
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	if err := chartutil.ValidateAgainstSchema(ch, values); err != nil {
		return rendered{}, err
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: "cove", Namespace: "sandboxes", Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return rendered{}, err
	}
	r := rendered{
		deployments: map[string]*appsv1.Deployment{}, daemonSets: map[string]*appsv1.DaemonSet{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{},
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[name], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				r.deployments[head.Metadata.Name], obj = d, d
			case "apps/v1 DaemonSet":
				d := &appsv1.DaemonSet{}
				r.daemonSets[head.Metadata.Name], obj = d, d
			case "v1 Service":
				s := &corev1.Service{}
				r.services[head.Metadata.Name], obj = s, s
			case "v1 Secret":
				s := &corev1.Secret{}
				r.secrets[head.Metadata.Name], obj = s, s
			default:
				t.Fatalf("%s: an object the test does not know: %s %s", name, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s %s: %v\n%s", name, head.Kind, head.Metadata.Name, err, doc)
			}
		}
	}
	return r, nil
}

// expandK8s replaces $(NAME) in a container's argument as the kubelet
// does, from the container's env with values a cluster would give.
func expandK8s(args []string, env map[string]string) []string {
	re := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = re.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// envSecret is the Secret and key a container's variable comes from.
func envSecret(c corev1.Container, name string) (string, string) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	return "", ""
}

// volumeSecret is the Secret and key a pod's volume holds as path.
func volumeSecret(spec corev1.PodSpec, volume, path string) (string, string) {
	for _, v := range spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			for _, it := range v.Secret.Items {
				if it.Path == path {
					return v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return "", ""
}

// mount is the container's mount at path.
func mount(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volume(spec corev1.PodSpec, name string) (corev1.Volume, bool) {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// secretValue is a rendered Secret's value of key.
func secretValue(t *testing.T, r rendered, name, key string) string {
	t.Helper()
	s, ok := r.secrets[name]
	if !ok {
		t.Fatalf("no Secret %s rendered (have %v)", name, keys(r.secrets))
	}
	if v, ok := s.StringData[key]; ok {
		return v
	}
	v, ok := s.Data[key]
	if !ok {
		t.Fatalf("Secret %s has no key %s", name, key)
	}
	return string(v)
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

const (
	savesURL  = "s3://cove-saves/prod?endpoint=https://s3.internal.example:9000"
	dbURL     = "postgres://cove:pw@db.internal.example:5432/cove?sslmode=verify-full"
	fullToken = "cove-join-0000000000000000000000000000000000000000000000000000000000000000-abcdefghijklmnop0123"
)

// TestChartRender renders the chart for several value sets and checks
// the objects each makes.
func TestChartRender(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		// secrets are the Secrets the chart must make, and their values
		// (a value "" is only checked to be there).
		secrets map[string]map[string]string
		// database and joinToken are the Secret and key each comes from
		// ("" joinToken: none, so no node runs).
		database, joinToken [2]string
		secretsKey          [2]string
		nodes               bool
		cgroupParent        string
		replicas            int32
	}{
		{
			name: "existing secrets",
			values: map[string]any{
				"database":   map[string]any{"existingSecret": "pg", "existingSecretKey": "dsn"},
				"joinToken":  map[string]any{"existingSecret": "join"},
				"secretsKey": map[string]any{"existingSecret": "sealing", "existingSecretKey": "hex"},
				"saves":      map[string]any{"url": savesURL, "credentialsSecret": "s3creds"},
			},
			secrets:  map[string]map[string]string{},
			database: [2]string{"pg", "dsn"}, joinToken: [2]string{"join", "token"}, secretsKey: [2]string{"sealing", "hex"},
			nodes: true, cgroupParent: "/cove", replicas: 2,
		},
		{
			name: "secrets the chart makes",
			values: map[string]any{
				"database":  map[string]any{"url": dbURL},
				"joinToken": map[string]any{"value": fullToken},
				"saves":     map[string]any{"url": savesURL},
				"control":   map[string]any{"replicas": 3, "extraArgs": []any{"--cpu-overcommit=4"}},
				"node":      map[string]any{"cgroupParent": "/sandboxes", "dataDir": "/srv/cove", "extraArgs": []any{"--cpus=16"}},
			},
			secrets: map[string]map[string]string{
				"cove-database":    {"url": dbURL},
				"cove-join-token":  {"token": fullToken},
				"cove-secrets-key": {"key": ""},
			},
			database: [2]string{"cove-database", "url"}, joinToken: [2]string{"cove-join-token", "token"}, secretsKey: [2]string{"cove-secrets-key", "key"},
			nodes: true, cgroupParent: "/sandboxes", replicas: 3,
		},
		{
			// The first install: no join token yet, so the control plane
			// makes one and no node runs.
			name: "no join token yet",
			values: map[string]any{
				"database": map[string]any{"existingSecret": "pg"},
				"saves":    map[string]any{"url": savesURL},
			},
			secrets:  map[string]map[string]string{"cove-secrets-key": {"key": ""}},
			database: [2]string{"pg", "url"}, secretsKey: [2]string{"cove-secrets-key", "key"},
			replicas: 2,
		},
		{
			name: "nodes disabled",
			values: map[string]any{
				"database":  map[string]any{"existingSecret": "pg"},
				"joinToken": map[string]any{"existingSecret": "join"},
				"saves":     map[string]any{"url": savesURL},
				"node":      map[string]any{"enabled": false},
			},
			secrets:  map[string]map[string]string{"cove-secrets-key": {"key": ""}},
			database: [2]string{"pg", "url"}, joinToken: [2]string{"join", "token"}, secretsKey: [2]string{"cove-secrets-key", "key"},
			replicas: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := render(t, tt.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if got := keys(r.secrets); !slices.Equal(got, keys(tt.secrets)) {
				t.Errorf("Secrets %v, want %v", got, keys(tt.secrets))
			}
			for name, kv := range tt.secrets {
				for k, want := range kv {
					if got := secretValue(t, r, name, k); want != "" && got != want {
						t.Errorf("Secret %s %s = %q, want %q", name, k, got, want)
					}
				}
			}
			if tt.secretsKey[0] == "cove-secrets-key" {
				key := secretValue(t, r, "cove-secrets-key", "key")
				if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(key) {
					t.Errorf("the secrets key the chart made is %q, want 64 hex digits", key)
				}
				if r.secrets["cove-secrets-key"].Annotations["helm.sh/resource-policy"] != "keep" {
					t.Error("the secrets key the chart made goes with an uninstall (want helm.sh/resource-policy: keep)")
				}
			}
			checkControl(t, r, tt.database, tt.joinToken, tt.secretsKey, tt.replicas)
			ds, ok := r.daemonSets["cove-node"]
			if ok != tt.nodes {
				t.Fatalf("node DaemonSet rendered: %v, want %v", ok, tt.nodes)
			}
			if ok {
				checkNode(t, ds, tt.values, tt.joinToken, tt.cgroupParent)
			}
		})
	}
}

// checkControl checks the control plane's Deployment and Service.
func checkControl(t *testing.T, r rendered, database, joinToken, secretsKey [2]string, replicas int32) {
	t.Helper()
	d, ok := r.deployments["cove-control"]
	if !ok {
		t.Fatalf("no control Deployment (have %v)", keys(r.deployments))
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		t.Errorf("replicas %v, want %d", d.Spec.Replicas, replicas)
	}
	pod := d.Spec.Template.Spec
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not on the pod (%v)", k, v, d.Spec.Template.Labels)
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers: %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	// Root, for the one thing that needs it (an imported image unpacked
	// with its files' owners and modes to be checked), with no other
	// capability.
	if sc := c.SecurityContext; sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}) ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("the control plane's container is not locked down: %+v", sc)
	}
	if sc := pod.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the control plane runs without the runtime's seccomp profile")
	}
	// The database URL comes from its Secret through the environment.
	if sec, key := envSecret(c, "COVE_STORE"); sec != database[0] || key != database[1] {
		t.Errorf("COVE_STORE from Secret %q key %q, want %q %q", sec, key, database[0], database[1])
	}
	if v, _ := flagValue(c.Args, "store"); v != "$(COVE_STORE)" {
		t.Errorf("--store %q, want $(COVE_STORE) (the URL never in the pod's spec)", v)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "postgres://") {
			t.Errorf("a database URL in the pod's spec: %q", a)
		}
	}
	// The secrets key is the Secret's file, its owner's alone (cove
	// refuses any other).
	keyFile, _ := flagValue(c.Args, "secrets-key-file")
	if m, ok := mount(c, filepath.Dir(keyFile)); !ok {
		t.Errorf("--secrets-key-file %q: not mounted", keyFile)
	} else {
		if sec, key := volumeSecret(pod, m.Name, filepath.Base(keyFile)); sec != secretsKey[0] || key != secretsKey[1] {
			t.Errorf("secrets key from Secret %q key %q, want %q %q", sec, key, secretsKey[0], secretsKey[1])
		}
		if v, _ := volume(pod, m.Name); v.Secret == nil || v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
			t.Errorf("the secrets key's file may be read by others than its owner: %+v", v.Secret)
		}
	}
	tokenFile, hasToken := flagValue(c.Args, "join-token-file")
	if hasToken != (joinToken[0] != "") {
		t.Errorf("--join-token-file given: %v, want %v", hasToken, joinToken[0] != "")
	}
	if hasToken {
		m, ok := mount(c, filepath.Dir(tokenFile))
		if !ok {
			t.Fatalf("--join-token-file %s: not mounted", tokenFile)
		}
		if sec, key := volumeSecret(pod, m.Name, filepath.Base(tokenFile)); sec != joinToken[0] || key != joinToken[1] {
			t.Errorf("join token from Secret %q key %q, want %q %q", sec, key, joinToken[0], joinToken[1])
		}
	}
	if v, _ := flagValue(c.Args, "saves"); v != savesURL {
		t.Errorf("--saves %q, want %q", v, savesURL)
	}
	if c.Args[0] != "control" {
		t.Fatalf("args %q: not cove control", c.Args)
	}
	checkArgs(t, "control Deployment", expandK8s(c.Args, map[string]string{"COVE_STORE": dbURL}))

	// The Service sends both ports to the pods' named ports.
	s, ok := r.services["cove-control"]
	if !ok {
		t.Fatalf("no control Service (have %v)", keys(r.services))
	}
	for k, v := range s.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, not on the pods", k, v)
		}
	}
	listen := map[string]string{"api": "listen", "nodes": "node-listen"}
	for _, p := range s.Spec.Ports {
		flag, ok := listen[p.TargetPort.StrVal]
		if !ok {
			t.Errorf("Service port %s targets %q", p.Name, p.TargetPort.String())
			continue
		}
		var port int32
		for _, cp := range c.Ports {
			if cp.Name == p.TargetPort.StrVal {
				port = cp.ContainerPort
			}
		}
		if addr, _ := flagValue(c.Args, flag); addr != fmt.Sprintf("0.0.0.0:%d", port) {
			t.Errorf("--%s %s, but the Service's port %s goes to container port %d", flag, addr, p.Name, port)
		}
	}
	if len(s.Spec.Ports) != 2 {
		t.Errorf("Service ports %+v, want api and nodes", s.Spec.Ports)
	}
}

// checkNode checks the node DaemonSet: what a node needs of its host.
func checkNode(t *testing.T, ds *appsv1.DaemonSet, values map[string]any, joinToken [2]string, cgroupParent string) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if !pod.HostPID || !pod.HostNetwork {
		t.Errorf("hostPID %v, hostNetwork %v: want both (sandboxes would die with the pod)", pod.HostPID, pod.HostNetwork)
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q: on the host's network the node would not resolve the control Service", pod.DNSPolicy)
	}
	c := pod.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("the node is not privileged")
	}
	if c.Args[0] != "node" {
		t.Fatalf("args %q: not cove node", c.Args)
	}
	dataDir, _ := flagValue(c.Args, "data-dir")
	if node, _ := values["node"].(map[string]any); node != nil && node["dataDir"] != nil && dataDir != node["dataDir"] {
		t.Errorf("--data-dir %q, want %q", dataDir, node["dataDir"])
	}
	for _, path := range []string{"/dev", dataDir} {
		m, ok := mount(c, path)
		if !ok {
			t.Errorf("%s: not mounted", path)
			continue
		}
		if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
			got := "none"
			if m.MountPropagation != nil {
				got = string(*m.MountPropagation)
			}
			t.Errorf("%s: propagation %s, want Bidirectional", path, got)
		}
		if v, ok := volume(pod, m.Name); !ok || v.HostPath == nil || v.HostPath.Path != path {
			t.Errorf("%s: not the host's %s: %+v", path, path, v)
		}
	}
	if m, ok := mount(c, "/sys/fs/cgroup"); !ok {
		t.Error("the host's cgroup tree is not mounted")
	} else if v, _ := volume(pod, m.Name); v.HostPath == nil || v.HostPath.Path != "/sys/fs/cgroup" {
		t.Errorf("/sys/fs/cgroup is not the host's: %+v", v)
	}
	// In the pod's cgroup namespace the sandboxes could not be moved
	// outside the pod's cgroup: the node runs in the host's.
	if !slices.Equal(c.Command, []string{"nsenter", "--cgroup=/proc/1/ns/cgroup", "--", "/usr/local/bin/cove"}) {
		t.Errorf("command %q: cove not run in the host's cgroup namespace", c.Command)
	}
	if cg, _ := flagValue(c.Args, "cgroup-parent"); cg != cgroupParent || strings.HasPrefix(cg, "/kubepods") {
		t.Errorf("--cgroup-parent %q, want %q (outside kubepods)", cg, cgroupParent)
	}
	tokenFile, _ := flagValue(c.Args, "join-token-file")
	m, ok := mount(c, filepath.Dir(tokenFile))
	if !ok {
		t.Fatalf("--join-token-file %q: not mounted", tokenFile)
	}
	if sec, key := volumeSecret(pod, m.Name, filepath.Base(tokenFile)); sec != joinToken[0] || key != joinToken[1] {
		t.Errorf("join token from Secret %q key %q, want %q %q", sec, key, joinToken[0], joinToken[1])
	}
	if ctl, _ := flagValue(c.Args, "control"); ctl != "https://cove-control.sandboxes.svc:7071" {
		t.Errorf("--control %q, want the control Service's node port", ctl)
	}
	checkArgs(t, "node DaemonSet", expandK8s(c.Args, map[string]string{"NODE_NAME": "host-a", "NODE_IP": "10.0.0.5"}))
}

// TestChartRefuses renders value sets that cannot work: each fails with
// the value to set named.
func TestChartRefuses(t *testing.T) {
	saves := map[string]any{"url": savesURL}
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no database", map[string]any{"saves": saves}, "database"},
		{"no save store", map[string]any{"database": map[string]any{"url": dbURL}}, "saves.url"},
		{"saves in a directory", map[string]any{"database": map[string]any{"url": dbURL}, "saves": map[string]any{"url": "/var/lib/cove/saves"}}, "saves.url"},
		{"cgroup parent under kubepods", map[string]any{
			"database": map[string]any{"url": dbURL}, "saves": saves, "joinToken": map[string]any{"value": fullToken},
			"node": map[string]any{"cgroupParent": "/kubepods/cove"},
		}, "node.cgroupParent"},
		{"relative cgroup parent", map[string]any{
			"database": map[string]any{"url": dbURL}, "saves": saves, "joinToken": map[string]any{"value": fullToken},
			"node": map[string]any{"cgroupParent": "cove"},
		}, "node.cgroupParent"},
	}
	// values.schema.json refuses these before any template runs.
	tests = append(tests, []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"replicas not a number", map[string]any{"database": map[string]any{"url": dbURL}, "saves": saves, "control": map[string]any{"replicas": "two"}}, "replicas"},
		{"no replica", map[string]any{"database": map[string]any{"url": dbURL}, "saves": saves, "control": map[string]any{"replicas": 0}}, "replicas"},
		{"database not postgres", map[string]any{"database": map[string]any{"url": "mysql://db/cove"}, "saves": saves}, "/database/url"},
		{"join token without its CA", map[string]any{"database": map[string]any{"url": dbURL}, "saves": saves, "joinToken": map[string]any{"value": "abcdefghijklmnop0123"}}, "/joinToken/value"},
		{"an extra argument not a flag", map[string]any{"database": map[string]any{"url": dbURL}, "saves": saves, "node": map[string]any{"extraArgs": []any{"serve"}}}, "/node/extraArgs"},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestChartValuesUsed checks that the chart's values file is what the
// render uses: every key of values.yaml is read by a template.
func TestChartValuesUsed(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "helm", "cove")
	b, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	var templates strings.Builder
	entries, err := os.ReadDir(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, "templates", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		templates.Write(b)
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			path := prefix + "." + k
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(path, sub)
				continue
			}
			if !strings.Contains(templates.String(), ".Values"+path) {
				t.Errorf("values.yaml: %s is read by no template", strings.TrimPrefix(path, "."))
			}
		}
	}
	walk("", vals)
}
