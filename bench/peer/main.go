// Command peer is the benchmark's controller-runtime peer of rollcall: the Policy status
// aggregation from the replica reports (status.go), as a controller written with
// controller-runtime would do it: an informer cache, a workqueue, status written through the
// status subresource, Events through the manager's events.k8s.io recorder, and the
// client-side rate limit off as controller-runtime ships it. It manages no webhooks.
//
// Usage: peer --namespace NS --metrics-bind-address 127.0.0.1:PORT --health-probe-bind-address 127.0.0.1:PORT
// (KUBECONFIG from the environment).
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

const policyServerField = "spec.policyServer"

type reconciler struct {
	client.Client
	namespace string
	events    recorder.EventRecorder
	reports   *reportCache
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var policy Policy
	if err := r.Get(ctx, req.NamespacedName, &policy); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	name := policy.Spec.PolicyServer
	in := input{policy: &policy, now: time.Now(), reports: r.reports}
	var server PolicyServer
	if err := r.Get(ctx, types.NamespacedName{Name: name}, &server); err == nil {
		in.server = &server
	} else if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	var deployment appsv1.Deployment
	if err := r.Get(ctx, types.NamespacedName{Namespace: r.namespace, Name: "policy-server-" + name}, &deployment); err == nil {
		in.deployment = &deployment
	} else if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	var replicaSets appsv1.ReplicaSetList
	if err := r.List(ctx, &replicaSets, client.InNamespace(r.namespace)); err != nil {
		return reconcile.Result{}, err
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(r.namespace), client.MatchingLabels{policyServerLabel: name}); err != nil {
		return reconcile.Result{}, err
	}
	in.replicaSets, in.pods = replicaSets.Items, pods.Items
	if policy.Status != nil {
		in.servedGeneration = policy.Status.ServedGeneration
	}

	status, events := computeStatus(in)
	if policy.Status != nil && reflect.DeepEqual(status, *policy.Status) {
		return reconcile.Result{}, nil
	}
	before := policy.DeepCopy()
	policy.Status = &status
	if err := r.Status().Patch(ctx, &policy, client.MergeFrom(before)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	for _, e := range events {
		r.events.Eventf(&policy, nil, e.Type, e.Reason, "Load", "%s", e.Note)
	}
	return reconcile.Result{}, nil
}

// policiesOf maps an object of a policy server (by label, or the PolicyServer itself) to
// every Policy of that server, through the cache's field index.
func (r *reconciler) policiesOf(server func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		name := server(obj)
		if name == "" {
			return nil
		}
		if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil && len(pod.Finalizers) == 0 {
			r.reports.forget(pod.UID)
		}
		var policies PolicyList
		if err := r.List(ctx, &policies, client.MatchingFields{policyServerField: name}); err != nil {
			ctrl.Log.Error(err, "listing the policies of a server", "server", name)
			return nil
		}
		requests := make([]reconcile.Request, 0, len(policies.Items))
		for _, p := range policies.Items {
			requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
		return requests
	}
}

func main() {
	namespace := flag.String("namespace", "rollcall-system", "where the policy servers run")
	metricsAddr := flag.String("metrics-bind-address", "127.0.0.1:8080", "")
	probeAddr := flag.String("health-probe-bind-address", "127.0.0.1:8081", "")
	concurrency := flag.Int("concurrency", 8, "reconciles at once (rollcall's --concurrency default)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("peer")

	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(addToScheme(scheme))
	labelled, err := labels.NewRequirement(policyServerLabel, selection.Exists, nil)
	must(err)
	ofServers := cache.ByObject{
		Namespaces: map[string]cache.Config{*namespace: {}},
		Label:      labels.NewSelector().Add(*labelled),
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *probeAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:        ofServers,
			&appsv1.ReplicaSet{}: ofServers,
			&appsv1.Deployment{}: ofServers,
		}},
	})
	must(err)
	ctx := ctrl.SetupSignalHandler()
	must(mgr.GetFieldIndexer().IndexField(ctx, &Policy{}, policyServerField, func(o client.Object) []string {
		return []string{o.(*Policy).Spec.PolicyServer}
	}))

	r := &reconciler{
		Client:    mgr.GetClient(),
		namespace: *namespace,
		events:    mgr.GetEventRecorder("rollcall-peer"),
		reports:   &reportCache{byPod: map[types.UID]cachedReading{}},
	}
	byLabel := func(o client.Object) string { return o.GetLabels()[policyServerLabel] }
	byName := func(o client.Object) string { return o.GetName() }
	must(ctrl.NewControllerManagedBy(mgr).
		For(&Policy{}).
		Watches(&PolicyServer{}, handler.EnqueueRequestsFromMapFunc(r.policiesOf(byName))).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.policiesOf(byLabel))).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(r.policiesOf(byLabel))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.policiesOf(byLabel))).
		WithOptions(controller.Options{MaxConcurrentReconciles: *concurrency}).
		Named("policy").
		Complete(r))

	// Ready once the informers have synced, as the bench waits for rollcall's /readyz.
	var synced atomic.Bool
	go func() { synced.Store(mgr.GetCache().WaitForCacheSync(ctx)) }()
	must(mgr.AddReadyzCheck("synced", func(*http.Request) error {
		if !synced.Load() {
			return errors.New("informers not synced")
		}
		return nil
	}))
	must(mgr.AddHealthzCheck("ping", healthz.Ping))
	log.Info("starting", "namespace", *namespace)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

func must(err error) {
	if err != nil {
		ctrl.Log.Error(err, "setup failed")
		os.Exit(1)
	}
}
