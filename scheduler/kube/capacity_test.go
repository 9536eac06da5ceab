package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestCapacity(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Status: corev1.PodStatus{Phase: phase}}
	}
	quota := func(used, hard string) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "default"},
			Status: corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(hard)},
				Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(used)}}}
	}
	client := fake.NewSimpleClientset(pod("a-worker-0", corev1.PodRunning), pod("b-worker-1", corev1.PodPending), quota("10", "10"))
	l, err := New(Config{Client: client, Image: "kelpie"})
	if err != nil {
		t.Fatal(err)
	}
	c := l.Capacity(context.Background(), "a")
	if len(c.Pending) != 1 || c.Pending[0] != "b-worker-1" || !c.Full || c.Quota != "q: pods 10/10" || c.Err != "" {
		t.Errorf("Capacity() = %+v; want b-worker-1 Pending, quota q full", c)
	}
	l2, _ := New(Config{Client: fake.NewSimpleClientset(quota("3", "10")), Image: "kelpie"})
	if c := l2.Capacity(context.Background(), "a"); len(c.Pending) != 0 || c.Full || c.Quota != "q: pods 3/10" {
		t.Errorf("Capacity() = %+v; want room", c)
	}
}
