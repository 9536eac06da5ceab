package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kelpie/kelpie/scheduler/preview"
)

// Capacity says whether one more Pod of the job would start now (an action
// preview, scheduler/preview): the namespace's Pods Pending right now —
// asked of the API server, not the informer's cache, and of every job,
// since a new Pod queues behind them all — and its ResourceQuotas' use of
// Pods.
func (l *Launcher) Capacity(ctx context.Context, job string) preview.Cluster {
	var c preview.Cluster
	pods, err := l.cfg.Client.CoreV1().Pods(l.ns()).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
	if err != nil {
		c.Err = fmt.Sprintf("list Pods: %v", err)
		return c
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil {
			c.Pending = append(c.Pending, p.Name)
		}
	}
	slices.Sort(c.Pending)
	quotas, err := l.cfg.Client.CoreV1().ResourceQuotas(l.ns()).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.Err = fmt.Sprintf("list ResourceQuotas: %v", err)
		return c
	}
	var uses []string
	for _, q := range quotas.Items {
		hard, ok := q.Status.Hard[corev1.ResourcePods]
		if !ok {
			continue
		}
		used := q.Status.Used[corev1.ResourcePods]
		uses = append(uses, fmt.Sprintf("%s: pods %s/%s", q.Name, used.String(), hard.String()))
		if used.Cmp(hard) >= 0 {
			c.Full = true
		}
	}
	c.Quota = strings.Join(uses, ", ")
	return c
}
