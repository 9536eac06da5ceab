// Package policytest proves that a policy is added in one file: its tests
// register a toy policy (toy_test.go, the whole of it) and check that the
// registry lists it, that the job spec decodes and bounds its parameters,
// and that it proposes. Nothing outside the tests lives here.
package policytest
