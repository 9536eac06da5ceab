package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExitOf(t *testing.T) {
	term := func(code int32, reason string) *corev1.Pod {
		phase := corev1.PodFailed
		if code == 0 {
			phase = corev1.PodSucceeded
		}
		return &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}}}}
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		reason string
		bad    bool
	}{
		{"running", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "", false},
		{"succeeded", term(0, "Completed"), "", false},
		{"oom", term(137, "OOMKilled"), "OOMKilled", true},
		{"error", term(1, ""), "Error", true},
		{"evicted", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low memory"}}, "Evicted", true},
	} {
		reason, _, bad := exitOf(tc.pod)
		if reason != tc.reason || bad != tc.bad {
			t.Errorf("exitOf(%s) = %q, %v; want %q, %v", tc.name, reason, bad, tc.reason, tc.bad)
		}
	}
}

func TestPodNamesFit(t *testing.T) {
	// Job names are at most 63 characters of [a-z0-9-] (core/spec); a
	// root name must leave room for the Secret's suffix.
	if got := PodName("j", "worker-12", 3); got != "j-worker-12-3" {
		t.Errorf("PodName = %q", got)
	}
	if got := SecretName("j"); got != "kelpie-j-certs" {
		t.Errorf("SecretName = %q", got)
	}
}
