// Package spec parses, defaults and validates kelpie job specs: the one YAML
// file that describes a training job, its cluster, its synchronisation model,
// its straggler policies, the slowness injected for experiments and the
// operator actions scripted over time.
//
// Parse reports every unknown key and bad value at once, sorted by line, each
// naming its key path and line:
//
//	spec.yaml:7: cluster.workers: must be at least 1 (got 0)
//	spec.yaml:12: sync.modle: unknown key (did you mean "model"?)
//
// Spec.YAML writes a spec back in canonical form with every default filled in.
//
// # Keys
//
// Every key below is optional except name, and defaults to the value shown.
// Durations are Go durations (5s, 200ms, 1m30s; a bare 0 is zero). Sizes are
// bytes, as a number or with a unit (4MiB, 500KB; KB is 1000 bytes, KiB
// 1024); rates are sizes per second (20MiB/s, 500KB/s, 1GB/s).
//
//	name:                        required; lowercase letters, digits and '-',
//	                             starting and ending with a letter or digit, at
//	                             most 63 characters (a DNS label, so it can name pods)
//	model:
//	  kind: mlp                  softmax | mlp | sparse-lr | torch; sparse-lr when data.kind
//	                             is synthetic-ctr
//	  hidden: [128]              mlp only: hidden layer widths, each >= 1
//	  script: model.py           torch only, required: the PyTorch script (model(),
//	                             train_set(), test_set(); docs/torch.md), relative to
//	                             the spec
//	  threads: 1                 torch only: torch threads of each worker's child
//	  tensors: []                torch only, computed: `kelpie run` and `kelpie job
//	                             submit` run the script's model() once and list its
//	                             parameters ({name, rows, cols, sparse}) here
//	data:
//	  kind: mnist                mnist | synthetic-ctr | torch; synthetic-ctr when model.kind
//	                             is sparse-lr (softmax and mlp train on mnist,
//	                             sparse-lr on synthetic-ctr), torch when it is torch
//	                             (the script's train_set() and test_set(); samples
//	                             and test_samples are then computed from them)
//	  epochs: 1                  >= 1
//	  batches_per_shard: 10      >= 1; M, the batches in one data shard
//	  seed: 1                    any integer; the run is deterministic given it
//	  samples: 200000            synthetic-ctr only (mnist ignores these four): training samples
//	  test_samples: 20000        synthetic-ctr: held-out samples
//	  features: 100000           synthetic-ctr: width of the sparse feature space
//	  fields: 8                  synthetic-ctr: non-zero features per sample, <= features
//	train:
//	  global_batch: 256          >= 1 and >= cluster.workers; fixed while workers'
//	                             local batches change
//	  lr: 0.1                    > 0
//	  optimizer: sgd             sgd | momentum | adam
//	  momentum: 0.9              optimizer momentum only; in [0, 1)
//	  lr_decay: none             none | cosine | linear: lr falls over the job's
//	                             iterations to lr_final x lr at the last one
//	  lr_final: 0                in [0, 1]; with lr_decay cosine or linear
//	cluster:
//	  servers: 1                 >= 1; named server-0, server-1, ...; 0 (the
//	                             default) and only 0 for exchange ring or rat
//	  workers: 1                 >= 1; named worker-0, worker-1, ...
//	  block_bytes: 4194304       >= 1; parameter block size (PSLD's 4 MiB)
//	  assignment: round-robin    round-robin | size-balanced | psld | mxnet
//	                             (how blocks go to servers; mxnet is MXNet-style)
//	  exchange: ps               ps | ring | rat (ring and rat are allreduce among
//	                             the workers, no servers: sync.model must be bsp,
//	                             the model dense; RAT builds one aggregator per
//	                             rack and pod from topology)
//	  transport: tcp             tcp | grpc: what carries tensors between workers
//	                             and servers (tcp: kelpie's framed transport, a
//	                             Unix socket on one host; grpc keeps every
//	                             control service either way)
//	  data_plane_encryption: off off | on: on puts every framed TCP connection
//	                             and every allreduce peer connection
//	                             in TLS with the node certificates (costs
//	                             throughput: kelpie bench pushpull
//	                             --encryption on); off still authenticates
//	                             each connection with the job's secret. Unix
//	                             sockets (one host) stay plain
//	  elasticity: hot            hot | checkpoint-restart (the papers' baseline)
//	  snapshot_interval: 30s     >= 0; servers' periodic snapshot; 0 turns it off
//	  topology: {}               region labels by node name, e.g.
//	                             {worker-0: {rack: r0, pod: p0}}; each entry gives a
//	                             rack, a pod, a host or several (letters, digits, '.',
//	                             '_', '-'); unlabelled nodes share one region; nodes
//	                             naming the same host share it (by default each node
//	                             is a host of its own)
//	  hosts: local               local (every node on 127.0.0.1) | netns (every host a
//	                             network namespace with its own address, the hosts of
//	                             a rack on one bridge, racks joined by uplinks; root)
//	  links: {}                  netns: {host: RATE, uplink: RATE, delay: DURATION},
//	                             each > 0 (delay >= 0): every host's link and every
//	                             rack's uplink, each way; left out: unshaped
//	  spare_hosts: 0             >= 0, hosts local only; simulated hosts kept free
//	                             for restarts. Each node starts on a host of its
//	                             own, named after it (worker-2 on host worker-2),
//	                             the spares are spare-0, spare-1, ...; the
//	                             injections of stragglers (below) that are not
//	                             follows_restart or cured_by_restart belong to
//	                             that first host. A KILL_RESTART with a host free
//	                             stops the node's agent and launches it on the
//	                             host free longest (the one it left becomes free):
//	                             there it has that host's injections (none on a
//	                             spare) and its own follows_restart ones. With
//	                             none free (and with 0) it restarts in place. A
//	                             server's restart (a new server takes its blocks)
//	                             lands on a free host the same way, else on the
//	                             old server's host, whose injections it then has
//	                             (with 0, as before: the new server has none of
//	                             the old one's). kind cpu competitors run beside
//	                             the node on its host: a host left empty has none.
//	                             A removed node's host is not reused. Ignored on
//	                             Kubernetes, where the cluster places the new Pod
//	  batch_sizes: {}            local batch size of every starting worker, e.g.
//	                             {worker-0: 96, worker-1: 32}; each >= 1, summing to
//	                             train.global_batch; by default the global batch
//	                             split evenly, the remainder to the first workers
//	  min_workers: 1             in [1, workers]; EPS multi-job scheduling (a
//	  min_servers: 1             scheduler with a capacity) may launch or shrink
//	                             (0 for ring and rat)
//	                             the job down to these
//	  max_workers: 0             0 (no limit) or >= workers (and <= global_batch);
//	  max_servers: 0             0 (no limit) or >= servers; EPS may grow the job up
//	                             to these, and stragglers may name the nodes it adds
//	  resources: {}              Kubernetes only: each role's Pod requests, e.g.
//	                             {server: {cpu: "1", memory: 1Gi}, worker: {cpu: 500m}};
//	                             memory is also the Pod's limit (docs/kubernetes.md)
//	sync:
//	  model: bsp                 bsp | asp | ssp | dsps | drop | pssp
//	  staleness: 3               >= 0; s for ssp, pssp and dsps
//	  pull: lazy                 lazy | soft-barrier: how delayed pulls are served
//	  pssp:
//	    c: 0.5                   in [0, 1]; constant pass probability
//	    alpha: 1                 in (0, 1]; with dynamic, P(s,k) = alpha/(1+e^(s-k))
//	    dynamic: false
//	  drop:
//	    wait_for: workers-1      N_t, in [1, workers]; the default is at least 1
//	policies:                    one key per registered policy (scheduler/policy),
//	                             each {mode: auto | approve | off, <its params>};
//	                             decoded against the declarations in core/policydecl:
//	                             an undeclared policy or parameter, a value of the
//	                             wrong type or outside the declared bound, or a
//	                             broken declared rule is an error at its key's line.
//	                             The builtin ones (defaults and bounds: docs/scheduler.md):
//	  antdt-nd:                  {mode: off, lambda: 1.5, window_transient: 5s,
//	                             window_persistent: 20s}
//	  antdt-dd:                  {mode: off, min_accumulation: 1, max_accumulation: 5,
//	                             min_batch: 1, max_batch: 0}
//	  backup-workers:            {mode: off, drop: 1}; drop < workers unless off
//	  adjust-lr:                 {mode: off, min_scale: 0}
//	  psld:                      {mode: off, epsilon: 0.1, theta1_over_theta0: 1,
//	                             scale_threshold: 0.5, variance_threshold: 1,
//	                             strawman: false}; needs exchange ps unless off
//	stragglers:                  a list; each entry:
//	  - node:                    required; a node the cluster starts with or a
//	                             scripted add creates (kind link: node or region)
//	    region:                  link only: a rack label of cluster.topology whose
//	                             uplink is capped
//	    kind:                    required: compute | cpu | cpu-sleep | bandwidth |
//	                             pause | link (link: tc caps the node's link or the
//	                             rack's uplink, each way; needs hosts netns)
//	    sleep:                   compute (required), > 0: SleepDuration; the added
//	                             delay per iteration (a server: per request) is
//	                             sleep x intensity
//	    intensity: 1             compute, in [0, 1]. cpu (required), in [0, 1): a
//	                             competitor takes that share of the CPU the node's
//	                             process is pinned to, for real (runtime/contend).
//	                             cpu-sleep (required), in [0, 1): compute time is
//	                             multiplied by 1/(1-intensity) by sleeping (on a
//	                             server: its time handling each request; a torch
//	                             model's: its child's forward and backward)
//	    probability: 1           compute and cpu-sleep, in [0, 1]: chance per
//	                             iteration; cpu: 1 only (it contends while active)
//	    rate:                    bandwidth and link (required), > 0: the link's limit
//	                             in bytes per second, each direction separately
//	                             (bandwidth: a server's link, in the process)
//	    start: 0s                >= 0
//	    end:                     after start; by default the injection never ends
//	    period:                  with on, transient: active for on out of every
//	    on:                      period, 0 < on <= period
//	    follows_restart: false   keep the injection after a KILL_RESTART even when
//	                             the launcher places the node on another host (a
//	                             spare host, cluster.spare_hosts; a new Pod on
//	                             Kubernetes); a node restarted where it was (its
//	                             agent restarts its role in place, what every
//	                             launcher does without a spare host) keeps its
//	                             host's injections anyway
//	    cured_by_restart: false  the slowness is the process's own (a leak, a
//	                             stuck thread), not its host's: a KILL_RESTART
//	                             cures it, also in place; not with
//	                             follows_restart
//	script:                      a list of timed operator actions; each entry:
//	  - at:                      required, >= 0
//	    action:                  required: add-server | remove-server | add-worker |
//	                             remove-worker | restart | adjust-batch | reassign |
//	                             set-sync
//	    node:                    remove-* and restart: required, a node running at
//	                             that time; add-*: the node created (filled in;
//	                             the n-th add-server in time order creates
//	                             server-<servers+n-1>, names are never reused)
//	    sizes:                   adjust-batch (required): every running worker's
//	                             local batch, summing to train.global_batch
//	    assignment:              reassign: algorithm to use; by default the current one
//	    model, staleness, pull,  set-sync: the new sync settings, keys as under
//	    pssp, drop:              sync; keys left out keep the sync section's values
//
// Steps run in order of at, and in file order at equal times. Adding or
// removing servers, reassign and psld need exchange ps (with ring or rat,
// adding, removing and restarting workers rebuild the ring or trees at an
// iteration boundary); no step may remove the last server or worker, or
// leave more workers than the global batch.
//
// A key given a value of the wrong type (a string where an integer belongs),
// a key a straggler kind or script action does not use, and a key given
// twice are errors. A key whose value is null counts as left out. Anchors,
// aliases and merge keys (<<) work as in YAML.
package spec
