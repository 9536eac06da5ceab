package kube_test

import (
	"context"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/kube"
	"github.com/kelpie/kelpie/scheduler/kube/kubetest"
)

// testDeploy checks deploy/: the kustomize base passes a server-side dry
// run, and its Role is enough for the launcher and no more — with the
// ServiceAccount's own token a job's objects are created, replaced and
// deleted, and a verb outside the Role is Forbidden. (testTrain and
// testBusy run whole jobs with that token.)
func testDeploy(t *testing.T, c *kubetest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "-k", "../../deploy/"); err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k deploy/: %v\n%s", err, out)
	}
	sa := saClient(t, c)
	var evs events
	l, err := kube.New(kube.Config{Client: sa, Namespace: "default", Image: "kelpie:test", Events: evs.add})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx); err != nil {
		t.Fatalf("informer with the ServiceAccount's token: %v", err)
	}
	s, err := spec.Parse("kt.yaml", []byte(jobYAML))
	if err != nil {
		t.Fatal(err)
	}
	s.Name = "rbac"
	if err := l.StartJob(ctx, s); err != nil {
		t.Fatalf("StartJob with the Role: %v", err)
	}
	for _, n := range []string{"worker-0", "worker-1"} {
		if err := l.StartNode(ctx, "rbac", "worker", n, []string{"agent"}); err != nil {
			t.Fatalf("StartNode with the Role: %v", err)
		}
	}
	if _, err := l.Restart(ctx, "rbac", "worker-0"); err != nil {
		t.Fatalf("Restart with the Role: %v", err)
	}
	if err := l.StopNode(ctx, "rbac", "worker-1"); err != nil {
		t.Fatalf("StopNode with the Role: %v", err)
	}
	if err := l.EndJob(ctx, "rbac"); err != nil {
		t.Fatalf("EndJob with the Role: %v", err)
	}
	// Outside the Role: reading a Secret, listing nodes.
	if _, err := sa.CoreV1().Secrets("default").Get(ctx, kube.SecretName("rbac"), metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get secret with the scheduler's token: %v; want Forbidden", err)
	}
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list nodes with the scheduler's token: %v; want Forbidden", err)
	}
}

// saClient applies deploy/'s ServiceAccount, Role and RoleBinding (not the
// Deployment: no image here) and returns a client that authenticates with
// a token of that ServiceAccount: it can do what the Role grants and
// nothing more.
func saClient(t *testing.T, c *kubetest.Cluster) kubernetes.Interface {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, f := range []string{"serviceaccount", "role", "rolebinding"} {
		if out, err := c.Kubectl(ctx, "apply", "-f", "../../deploy/kubernetes/"+f+".yaml"); err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	exp := int64(3600)
	tok, err := c.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "kelpie-scheduler",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of kelpie-scheduler: %v", err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tok.Status.Token
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}
