package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/scheduler/pki"
)

func certsCmd() *cobra.Command {
	var dataDir, caCert, caKey string
	c := &cobra.Command{Use: "certs", Short: "the node plane's CA: show, rotate, issue certificates",
		Long: `certs manages the certificate authority a scheduler keeps in its data directory (ca.crt,
ca.key; or the --ca-cert/--ca-key it was given). Every node of a job gets a short-lived
certificate naming kelpie://JOB/NODE at launch; operators issue client certificates for
grpcurl or scripts with "certs issue --operator NAME". See docs/security.md.`}
	c.PersistentFlags().StringVar(&dataDir, "data-dir", "kelpie-data", "the scheduler's data directory")
	c.PersistentFlags().StringVar(&caCert, "ca-cert", "", "a CA certificate file given to the scheduler instead of the data dir's")
	c.PersistentFlags().StringVar(&caKey, "ca-key", "", "its key")
	paths := func() (string, string) {
		if caCert != "" || caKey != "" {
			return caCert, caKey
		}
		return filepath.Join(dataDir, pki.CertFile), filepath.Join(dataDir, pki.KeyFile)
	}
	load := func() (*pki.CA, error) {
		cp, kp := paths()
		if _, err := os.Stat(kp); errors.Is(err, os.ErrNotExist) && caKey == "" {
			return nil, fmt.Errorf("no CA in %s yet: the scheduler creates one on its first start (or run kelpie certs rotate)", dataDir)
		}
		return pki.Load(cp, kp)
	}

	show := &cobra.Command{Use: "show", Short: "print the CA certificates trusted, the issuing one first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := load()
			if err != nil {
				return err
			}
			for i, t := range ca.Trusted {
				what := "trusted"
				if i == 0 {
					what = "issuing"
				}
				fmt.Printf("%s  %s  sha256:%s  valid %s .. %s\n", what, t.Subject.CommonName, pki.Fingerprint(t),
					t.NotBefore.UTC().Format(time.RFC3339), t.NotAfter.UTC().Format(time.RFC3339))
			}
			return nil
		}}

	var dropOld bool
	rotate := &cobra.Command{Use: "rotate", Short: "make a new issuing CA; the old one stays trusted until --drop-old", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if caCert != "" || caKey != "" {
				return exitCode(2, errors.New("rotate works on the data dir's CA; replace a supplied --ca-cert/--ca-key yourself"))
			}
			var n *pki.CA
			if _, err := os.Stat(filepath.Join(dataDir, pki.KeyFile)); errors.Is(err, os.ErrNotExist) {
				if n, err = pki.New("kelpie CA", time.Now()); err != nil {
					return err
				}
			} else {
				old, err := load()
				if err != nil {
					return err
				}
				if n, err = old.Rotate(dropOld); err != nil {
					return err
				}
			}
			if err := n.Save(dataDir); err != nil {
				return err
			}
			fmt.Printf("issuing CA sha256:%s (%d trusted); restart the scheduler to issue from it\n", pki.Fingerprint(n.Cert), len(n.Trusted))
			return nil
		}}
	rotate.Flags().BoolVar(&dropOld, "drop-old", false, "stop trusting the older CA certificates (once their certificates have expired)")

	var operator, job, node, out, instance string
	var ttl time.Duration
	var hosts []string
	issue := &cobra.Command{Use: "issue --out FILE (--operator NAME | --job JOB --node NODE)",
		Short: "issue a certificate: an operator's client certificate, or a node's",
		Long: `issue writes a credentials file (mode 0600): the certificate, its private key, then the CA
certificates. grpcurl reads it as -cert, -key and -cacert alike:

  kelpie certs issue --operator alice --out alice.pem
  grpcurl -cert alice.pem -key alice.pem -cacert alice.pem 127.0.0.1:7070 list

A node's file is what an agent started by hand takes with --cert.`, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var id identity.Identity
			switch {
			case operator != "" && job == "" && node == "":
				id = identity.Operator(operator)
			case operator == "" && job != "" && node != "":
				id = identity.Node(job, node)
			default:
				return exitCode(2, errors.New("give --operator NAME, or --job and --node"))
			}
			if err := id.Validate(); err != nil {
				return exitCode(2, err)
			}
			if out == "" {
				return exitCode(2, errors.New("--out FILE is required"))
			}
			ca, err := load()
			if err != nil {
				return err
			}
			if id.Job != "" {
				// A node also gets its job's data-plane secret.
				key, err := pki.LoadOrCreateJobKey(dataDir)
				if err != nil {
					return err
				}
				if instance == "" {
					// The instance the scheduler's own nodes of the job have.
					if b, err := os.ReadFile(pki.InstancePath(dataDir, id.Job)); err == nil {
						instance = strings.TrimSpace(string(b))
					}
				}
				if id = id.ForInstance(instance); instance != "" {
					if err := id.Validate(); err != nil {
						return exitCode(2, err)
					}
				}
				err = ca.WriteNodeBundle(out, id, ttl, pki.JobSecret(key, id.Job, instance), append(pki.LocalHosts(), hosts...)...)
				if err != nil {
					return err
				}
			} else if err := ca.WriteBundle(out, id, ttl, append(pki.LocalHosts(), hosts...)...); err != nil {
				return err
			}
			fmt.Printf("%s: %s, valid %s\n", out, id, ttl)
			return nil
		}}
	f := issue.Flags()
	f.StringVar(&operator, "operator", "", "an operator's name (client certificate for grpcurl and scripts)")
	f.StringVar(&job, "job", "", "a node's job")
	f.StringVar(&node, "node", "", "a node's name (worker-0, server-1, ...)")
	f.StringVar(&instance, "instance", "", "the job instance the node's certificate and secret are bound to (default: the one the scheduler's nodes of the job have, from the data dir; none: the job name only)")
	f.StringVar(&out, "out", "", "the credentials file to write (0600)")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "validity")
	f.StringSliceVar(&hosts, "host", nil, "more IP addresses or DNS names for the certificate (a server's)")

	c.AddCommand(show, rotate, issue)
	return c
}
