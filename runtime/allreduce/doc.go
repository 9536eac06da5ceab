// Package allreduce runs the allreduce plans of core/reduceplan (ring, RAT's trees, PS) over real
// connections between a job's worker processes: an Exchange dials and admits its peers on the
// framed transport (mutually authenticated, encrypted on request), moves each planned chunk and
// counts the bytes that cross each pair of regions; a Group re-forms the exchange as the workers
// come and go. What the plans are — which node sends which chunk to whom, and their checks — is
// pure data in core/reduceplan, which the scheduler reads too; this package is the part that
// moves bytes.
package allreduce
