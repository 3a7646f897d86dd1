package main

// The rollcall.dev/v1alpha1 types the peer reads and writes, hand-written as a small
// kubebuilder project would have them (only the fields the aggregation reads; the rest of a
// Policy is never sent: status patches go through the status subresource).

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var groupVersion = schema.GroupVersion{Group: "rollcall.dev", Version: "v1alpha1"}

type Policy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PolicySpec    `json:"spec"`
	Status            *PolicyStatus `json:"status,omitempty"`
}

type PolicySpec struct {
	PolicyServer string `json:"policyServer"`
}

// PolicyStatus has the fields rollcall writes, in its shape: every field but
// servedGeneration is always present.
type PolicyStatus struct {
	ObservedGeneration int64            `json:"observedGeneration"`
	Replicas           int32            `json:"replicas"`
	ReadyReplicas      int32            `json:"readyReplicas"`
	FailedReplicas     int32            `json:"failedReplicas"`
	Failures           []ReplicaFailure `json:"failures"`
	ServedGeneration   *int64           `json:"servedGeneration,omitempty"`
	Ready              string           `json:"ready"`
	Summary            string           `json:"summary"`
	Conditions         []Condition      `json:"conditions"`
}

type ReplicaFailure struct {
	Pod     string `json:"pod"`
	Message string `json:"message"`
}

// Condition is metav1.Condition with lastTransitionTime kept as the string it was read as
// (rollcall writes milliseconds; metav1.Time would round them away and rewrite every one).
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	LastTransitionTime string `json:"lastTransitionTime"`
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
}

type PolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Policy `json:"items"`
}

type PolicyServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PolicyServerSpec `json:"spec"`
}

type PolicyServerSpec struct {
	Replicas int32 `json:"replicas"`
}

type PolicyServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyServer `json:"items"`
}

func addToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(groupVersion, &Policy{}, &PolicyList{}, &PolicyServer{}, &PolicyServerList{})
	metav1.AddToGroupVersion(s, groupVersion)
	return nil
}

// Deep copies, as controller-gen would generate them.

func (in *PolicyStatus) DeepCopy() *PolicyStatus {
	if in == nil {
		return nil
	}
	out := *in
	if in.Failures != nil {
		out.Failures = append([]ReplicaFailure{}, in.Failures...)
	}
	if in.ServedGeneration != nil {
		v := *in.ServedGeneration
		out.ServedGeneration = &v
	}
	if in.Conditions != nil {
		out.Conditions = make([]Condition, len(in.Conditions))
		for i, c := range in.Conditions {
			out.Conditions[i] = c
			if c.ObservedGeneration != nil {
				v := *c.ObservedGeneration
				out.Conditions[i].ObservedGeneration = &v
			}
		}
	}
	return &out
}

func (in *Policy) DeepCopy() *Policy {
	out := &Policy{TypeMeta: in.TypeMeta, Spec: in.Spec, Status: in.Status.DeepCopy()}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func (in *Policy) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *PolicyList) DeepCopyObject() runtime.Object {
	out := &PolicyList{TypeMeta: in.TypeMeta, Items: copyItems(in.Items)}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	return out
}

func (in *PolicyServer) DeepCopy() *PolicyServer {
	out := &PolicyServer{TypeMeta: in.TypeMeta, Spec: in.Spec}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func (in *PolicyServer) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *PolicyServerList) DeepCopyObject() runtime.Object {
	out := &PolicyServerList{TypeMeta: in.TypeMeta, Items: copyItems(in.Items)}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	return out
}

// copyItems deep-copies a list's items (what deepcopy-gen would write out per type).
func copyItems[T any, P interface {
	*T
	DeepCopy() *T
}](items []T) []T {
	out := make([]T, len(items))
	for i := range items {
		out[i] = *P(&items[i]).DeepCopy()
	}
	return out
}
