package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kelpie/kelpie/scheduler/kube"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// kubeFlags are kelpie scheduler's Kubernetes launcher flags.
type kubeFlags struct {
	launcher, kubeconfig, namespace, image, exe string
	pending                                     time.Duration
	relaunches                                  int
}

func addKubeFlags(c *cobra.Command) *kubeFlags {
	k := &kubeFlags{}
	f := c.Flags()
	f.StringVar(&k.launcher, "launcher", "local", "where nodes run: local (processes on this machine) or kubernetes (one Pod per node, docs/kubernetes.md)")
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "kubernetes: the kubeconfig file (default: the in-cluster config, then $KUBECONFIG)")
	f.StringVar(&k.namespace, "namespace", "", "kubernetes: the namespace of the jobs' Pods (default: the scheduler's own in a cluster, else default)")
	f.StringVar(&k.image, "image", "kelpie:dev", "kubernetes: the image of the nodes' Pods")
	f.StringVar(&k.exe, "image-exe", "/kelpie", "kubernetes: the kelpie binary inside the image")
	f.DurationVar(&k.pending, "pending-threshold", 30*time.Second, "kubernetes: a Pod Pending this long makes its job \"cluster busy\"")
	f.IntVar(&k.relaunches, "relaunch-limit", 3, "kubernetes: how often a node's Pod deleted by someone else is relaunched")
	return k
}

// start builds the Kubernetes launcher when asked for; it delivers its
// events on events, which the daemon drains once it has started (those
// that come before wait in the channel).
func (k *kubeFlags) start(ctx context.Context, events chan<- launch.ClusterEvent) (*kube.Launcher, error) {
	switch k.launcher {
	case "local":
		return nil, nil
	case "kubernetes":
	default:
		return nil, exitCode(2, fmt.Errorf("--launcher must be local or kubernetes, not %q", k.launcher))
	}
	cfg, ns, err := kubeConfig(k.kubeconfig)
	if err != nil {
		return nil, err
	}
	if k.namespace != "" {
		ns = k.namespace
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	l, err := kube.New(kube.Config{Client: cs, Namespace: ns, Image: k.image, Exe: k.exe,
		PendingThreshold: k.pending, RelaunchLimit: k.relaunches, Deliver: events})
	if err != nil {
		return nil, err
	}
	if err := l.Run(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// kubeConfig loads --kubeconfig, else the in-cluster config, else the
// default loading rules ($KUBECONFIG, ~/.kube/config), and the namespace.
func kubeConfig(path string) (*rest.Config, string, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			ns := "default"
			if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
				ns = string(b)
			}
			return cfg, ns, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, nil
}

// clusterEventQueue is how many cluster events wait for the daemon to
// drain them; a launcher with a full queue waits (none is dropped).
const clusterEventQueue = 256
