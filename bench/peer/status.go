package main

// The Policy status aggregation of rollcall's functions/policy-core.ts and kstatus/conditions.ts,
// written again in Go: trust rules, per-replica states, the decision table, kstatus
// conditions and the Events of a transition. Pure: objects and a clock in, status out.

import (
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	policyServerLabel   = "rollcall.dev/policy-server"
	maxReportedFailures = 10
	failureMessageMax   = 1024
	eventNoteMax        = 1024
	conditionMessageMax = 32768
	stateReady          = "Ready"
	stateReconciling    = "Reconciling"
	stateStalled        = "Stalled"
)

type input struct {
	policy      *Policy
	server      *PolicyServer
	deployment  *appsv1.Deployment
	replicaSets []appsv1.ReplicaSet
	pods        []corev1.Pod
	// servedGeneration is what the webhook serves now. The peer manages no webhooks: it
	// keeps the generation its last status said was served.
	servedGeneration *int64
	now              time.Time
	reports          *reportCache
}

type event struct{ Type, Reason, Note string }

type readiness struct{ State, Reason, Message string }

type replicaKind int

const (
	loaded replicaKind = iota
	pending
	failed
)

type replica struct {
	pod    string
	ready  bool
	kind   replicaKind
	detail string // pending: why; failed: the message
}

type webhookIntent struct {
	kind       string // serve | keep | absent
	generation int64
}

func computeStatus(in input) (PolicyStatus, []event) {
	generation := in.policy.Generation
	var desired int32
	if in.server != nil {
		desired = in.server.Spec.Replicas
	}
	var replicas []replica
	if in.server != nil && deploymentTrusted(in.deployment, in.server) {
		replicas = liveReplicas(in, generation)
	}
	var readyCount int32
	failures := []ReplicaFailure{}
	for _, r := range replicas {
		if r.ready && r.kind == loaded {
			readyCount++
		}
		if r.kind == failed {
			failures = append(failures, ReplicaFailure{Pod: r.pod, Message: r.detail})
		}
	}
	sort.SliceStable(failures, func(i, j int) bool { return failures[i].Pod < failures[j].Pod })

	ready, webhook := decide(in, replicas, readyCount, failures, generation, desired)
	var served *int64
	switch webhook.kind {
	case "serve":
		g := webhook.generation
		served = &g
	case "keep":
		served = in.servedGeneration
	}
	if ready.State != stateReady {
		if served == nil {
			ready.Message += "; no webhook is registered"
		} else {
			ready.Message += fmt.Sprintf("; the webhook still enforces generation %d", *served)
		}
	}
	shown := []ReplicaFailure{}
	for i, f := range failures {
		if i == maxReportedFailures {
			break
		}
		shown = append(shown, ReplicaFailure{Pod: f.Pod, Message: truncateUTF8(f.Message, failureMessageMax)})
	}
	var previous []Condition
	if in.policy.Status != nil {
		previous = in.policy.Status.Conditions
	}
	status := PolicyStatus{
		ObservedGeneration: generation,
		Replicas:           desired,
		ReadyReplicas:      readyCount,
		FailedReplicas:     int32(len(failures)),
		Failures:           shown,
		ServedGeneration:   served,
		Ready:              fmt.Sprintf("%d/%d", readyCount, desired),
		Summary:            ready.State,
		Conditions:         setReadiness(previous, ready, generation, in.now),
	}
	return status, eventsFor(in.policy.Status, status, ready, generation)
}

func decide(in input, replicas []replica, readyCount int32, failures []ReplicaFailure, generation int64, desired int32) (readiness, webhookIntent) {
	server := in.policy.Spec.PolicyServer
	keep := webhookIntent{kind: "keep"}
	fallback := keep
	if in.servedGeneration == nil {
		fallback = webhookIntent{kind: "absent"}
	}
	progress := fmt.Sprintf("generation %d loaded on %d/%d replicas", generation, readyCount, desired)
	switch {
	case in.server == nil:
		return readiness{stateStalled, "PolicyServerNotFound", fmt.Sprintf("policy server %q does not exist", server)}, keep
	case !deploymentTrusted(in.deployment, in.server):
		return readiness{stateReconciling, "PolicyServerNotDeployed", fmt.Sprintf("policy server %q has no Deployment yet", server)}, keep
	case len(replicas) == 0 && desired == 0:
		return readiness{stateStalled, "PolicyServerScaledToZero", fmt.Sprintf("policy server %q is scaled to 0 replicas", server)}, keep
	case len(replicas) == 0:
		return readiness{stateReconciling, "WaitingForPods", fmt.Sprintf("policy server %q has no running pods yet (0/%d)", server, desired)}, keep
	case len(failures) > 0:
		others := ""
		if len(failures) > 1 {
			others = fmt.Sprintf(" (and %d more replicas)", len(failures)-1)
		}
		first := failures[0]
		return readiness{stateStalled, "LoadFailed", fmt.Sprintf("generation %d failed to load on pod %s: %s%s", generation, first.Pod, first.Message, others)}, fallback
	}
	var readyNotLoaded []replica
	for _, r := range replicas {
		if r.ready && r.kind != loaded {
			readyNotLoaded = append(readyNotLoaded, r)
		}
	}
	if len(readyNotLoaded) == 0 && readyCount >= desired && readyCount > 0 {
		return readiness{stateReady, "Loaded", progress}, webhookIntent{kind: "serve", generation: generation}
	}
	var waitingFor *replica
	if len(readyNotLoaded) > 0 {
		waitingFor = &readyNotLoaded[0]
	} else {
		for i := range replicas {
			if !replicas[i].ready || replicas[i].kind != loaded {
				waitingFor = &replicas[i]
				break
			}
		}
	}
	detail := ""
	if waitingFor != nil {
		why := "not Ready"
		if waitingFor.kind == pending {
			why = waitingFor.detail
		}
		detail = fmt.Sprintf("; waiting for pod %s (%s)", waitingFor.pod, why)
	}
	return readiness{stateReconciling, "Loading", progress + detail}, fallback
}

func controllerOf(m metav1.Object) *metav1.OwnerReference {
	for _, ref := range m.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			r := ref
			return &r
		}
	}
	return nil
}

func deploymentTrusted(d *appsv1.Deployment, server *PolicyServer) bool {
	if d == nil {
		return false
	}
	owner := controllerOf(d)
	return owner != nil && owner.Kind == "PolicyServer" && server.UID != "" && owner.UID == server.UID && d.UID != ""
}

func liveReplicas(in input, generation int64) []replica {
	ns := in.deployment.Namespace
	replicaSets := map[types.UID]bool{}
	for i := range in.replicaSets {
		rs := &in.replicaSets[i]
		owner := controllerOf(rs)
		if rs.Namespace == ns && owner != nil && owner.Kind == "Deployment" && owner.UID == in.deployment.UID && rs.UID != "" {
			replicaSets[rs.UID] = true
		}
	}
	var out []replica
	for i := range in.pods {
		pod := &in.pods[i]
		owner := controllerOf(pod)
		if pod.Labels[policyServerLabel] != in.server.Name || pod.Namespace != ns || owner == nil ||
			owner.Kind != "ReplicaSet" || !replicaSets[owner.UID] || pod.DeletionTimestamp != nil {
			continue
		}
		r := replica{pod: pod.Name, ready: podReady(pod)}
		r.kind, r.detail = replicaState(in.reports.read(pod.UID, pod.ResourceVersion, pod.Annotations), in.policy, generation)
		out = append(out, r)
	}
	return out
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func replicaState(r reading, policy *Policy, generation int64) (replicaKind, string) {
	switch {
	case r.absent:
		return pending, "no report yet"
	case r.invalid != "":
		return failed, fmt.Sprintf("invalid %s annotation: %s", reportAnnotation, r.invalid)
	}
	entry, ok := r.entries[policy.Name]
	switch {
	case !ok:
		return pending, "policy not reported yet"
	case entry.UID != string(policy.UID):
		uid := string(policy.UID)
		if uid == "" {
			uid = "unknown"
		}
		return pending, fmt.Sprintf("reports an older Policy of the same name (uid %s, this one is %s)", entry.UID, uid)
	case entry.Generation != generation:
		return pending, fmt.Sprintf("reports generation %d, not %d", entry.Generation, generation)
	}
	switch entry.State {
	case "Loaded":
		return loaded, ""
	case "Loading":
		return pending, fmt.Sprintf("loading generation %d", generation)
	}
	if entry.Message == nil {
		return failed, "load failed (no message)"
	}
	return failed, *entry.Message
}

func truncateUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	end := max - len("…")
	if end < 0 {
		end = 0
	}
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}

func findCondition(list []Condition, t string) *Condition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// setCondition: lastTransitionTime changes only when status, reason or message change.
func setCondition(list []Condition, t, status, reason, message string, generation int64, now time.Time) []Condition {
	message = truncateUTF8(message, conditionMessageMax)
	next := Condition{Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: &generation}
	if prev := findCondition(list, t); prev != nil && prev.Status == status && prev.Reason == reason && prev.Message == message {
		next.LastTransitionTime = prev.LastTransitionTime
	} else {
		// As JavaScript's toISOString, which rollcall writes.
		next.LastTransitionTime = now.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	out := append([]Condition{}, list...)
	for i := range out {
		if out[i].Type == t {
			out[i] = next
			return out
		}
	}
	return append(out, next)
}

// setReadiness keeps Ready, Reconciling and Stalled consistent; Ready comes first.
func setReadiness(list []Condition, r readiness, generation int64, now time.Time) []Condition {
	status := "False"
	if r.State == stateReady {
		status = "True"
	}
	out := setCondition(list, "Ready", status, r.Reason, r.Message, generation, now)
	for _, abnormal := range []string{stateReconciling, stateStalled} {
		if r.State == abnormal {
			out = setCondition(out, abnormal, "True", r.Reason, r.Message, generation, now)
			continue
		}
		kept := out[:0:0]
		for _, c := range out {
			if c.Type != abnormal {
				kept = append(kept, c)
			}
		}
		out = kept
	}
	rank := func(c Condition) int {
		switch c.Type {
		case "Ready":
			return 0
		case stateReconciling:
			return 1
		case stateStalled:
			return 2
		}
		return 3
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

func readinessOf(list []Condition) string {
	switch {
	case conditionTrue(list, "Ready"):
		return stateReady
	case conditionTrue(list, stateStalled):
		return stateStalled
	case conditionTrue(list, stateReconciling):
		return stateReconciling
	}
	return ""
}

func conditionTrue(list []Condition, t string) bool {
	c := findCondition(list, t)
	return c != nil && c.Status == "True"
}

// eventsFor: Events on transitions only, compared with the status written last time.
func eventsFor(previous *PolicyStatus, status PolicyStatus, r readiness, generation int64) []event {
	var prevConditions []Condition
	var prevFailures []ReplicaFailure
	var prevServed *int64
	if previous != nil {
		prevConditions, prevFailures, prevServed = previous.Conditions, previous.Failures, previous.ServedGeneration
	}
	prevState := readinessOf(prevConditions)
	prevReason := ""
	if c := findCondition(prevConditions, "Ready"); c != nil {
		prevReason = c.Reason
	}
	note := func(s string) string { return truncateUTF8(s, eventNoteMax) }
	var events []event
	if r.State == stateReady && (prevState != stateReady || prevServed == nil || *prevServed != generation) {
		events = append(events, event{"Normal", "Loaded", note(r.Message + "; the webhook enforces it")})
	}
	known := map[ReplicaFailure]bool{}
	for _, f := range prevFailures {
		known[f] = true
	}
	for _, f := range status.Failures {
		if !known[f] {
			events = append(events, event{"Warning", "LoadFailed", note(fmt.Sprintf("pod %s failed to load generation %d: %s", f.Pod, generation, f.Message))})
		}
	}
	if r.State == stateStalled && r.Reason != "LoadFailed" && (prevState != stateStalled || prevReason != r.Reason) {
		events = append(events, event{"Warning", r.Reason, note(r.Message)})
	}
	return events
}
