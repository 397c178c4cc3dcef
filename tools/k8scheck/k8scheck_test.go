// Package k8scheck checks the Kubernetes manifests in docs/k8s the way
// kubectl apply --dry-run=client would, without a cluster: every document
// decodes strictly (no unknown or misspelt field) into its API type, and
// the checks the API server would refuse at once hold (names, selectors
// that match their pod templates, named ports that exist, an Indexed Job
// with a completion count, a restart policy a Job accepts, Services that
// select some workload). It is a module of its own so that the Kubernetes
// API modules stay out of ovrun's. make test runs it.
package k8scheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

func TestManifests(t *testing.T) {
	files, err := filepath.Glob("../../docs/k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in docs/k8s (%v)", err)
	}
	var pods []map[string]string // labels of every pod template
	var services []*corev1.Service
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			where := fmt.Sprintf("%s document %d", filepath.Base(f), i+1)
			var tm v1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				strict(t, where, doc, &d)
				checkMeta(t, where, d.ObjectMeta)
				checkSelector(t, where, d.Spec.Selector, d.Spec.Template.Labels)
				checkPod(t, where, d.Spec.Template.Spec)
				pods = append(pods, d.Spec.Template.Labels)
			case "batch/v1 Job":
				var j batchv1.Job
				strict(t, where, doc, &j)
				checkMeta(t, where, j.ObjectMeta)
				if j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion && j.Spec.Completions == nil {
					t.Errorf("%s: an Indexed Job needs spec.completions", where)
				}
				if p := j.Spec.Template.Spec.RestartPolicy; p != corev1.RestartPolicyOnFailure && p != corev1.RestartPolicyNever {
					t.Errorf("%s: a Job's restartPolicy must be OnFailure or Never, not %q", where, p)
				}
				checkPod(t, where, j.Spec.Template.Spec)
				pods = append(pods, j.Spec.Template.Labels)
			case "v1 Service":
				var s corev1.Service
				strict(t, where, doc, &s)
				checkMeta(t, where, s.ObjectMeta)
				services = append(services, &s)
			case "v1 Secret":
				var s corev1.Secret
				strict(t, where, doc, &s)
				checkMeta(t, where, s.ObjectMeta)
			case "v1 ConfigMap":
				var c corev1.ConfigMap
				strict(t, where, doc, &c)
				checkMeta(t, where, c.ObjectMeta)
			default:
				t.Errorf("%s: kind %q %q is not one this check knows", where, tm.APIVersion, tm.Kind)
			}
		}
	}
	for _, s := range services {
		sel := labels.SelectorFromSet(s.Spec.Selector)
		found := false
		for _, l := range pods {
			found = found || sel.Matches(labels.Set(l))
		}
		if !found {
			t.Errorf("Service %s selects no pod template in docs/k8s", s.Name)
		}
	}
}

// strict decodes doc into v, refusing unknown fields.
func strict(t *testing.T, where string, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func checkMeta(t *testing.T, where string, m v1.ObjectMeta) {
	t.Helper()
	for _, e := range validation.IsDNS1123Subdomain(m.Name) {
		t.Errorf("%s: name %q: %s", where, m.Name, e)
	}
}

func checkSelector(t *testing.T, where string, sel *v1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	s, err := v1.LabelSelectorAsSelector(sel)
	if err != nil || sel == nil || s.Empty() {
		t.Errorf("%s: selector %v (%v): want a non-empty one", where, sel, err)
		return
	}
	if !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %s does not match the pod template's labels %v", where, s, podLabels)
	}
}

func checkPod(t *testing.T, where string, p corev1.PodSpec) {
	t.Helper()
	if len(p.Containers) == 0 {
		t.Errorf("%s: no containers", where)
	}
	volumes := map[string]bool{}
	for _, v := range p.Volumes {
		volumes[v.Name] = true
	}
	for _, c := range p.Containers {
		if c.Name == "" || c.Image == "" {
			t.Errorf("%s: a container needs a name and an image", where)
		}
		ports := map[string]bool{}
		for _, port := range c.Ports {
			if port.Name != "" {
				for _, e := range validation.IsValidPortName(port.Name) {
					t.Errorf("%s: port name %q: %s", where, port.Name, e)
				}
				ports[port.Name] = true
			}
		}
		for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if pr == nil {
				continue
			}
			var named string
			switch {
			case pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "":
				named = pr.HTTPGet.Port.StrVal
			case pr.TCPSocket != nil && pr.TCPSocket.Port.StrVal != "":
				named = pr.TCPSocket.Port.StrVal
			}
			if named != "" && !ports[named] {
				t.Errorf("%s: a probe names port %q, which container %s does not declare", where, named, c.Name)
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: mount %q names no volume of the pod", where, m.Name)
			}
			if !strings.HasPrefix(m.MountPath, "/") {
				t.Errorf("%s: mount path %q is not absolute", where, m.MountPath)
			}
		}
	}
}
