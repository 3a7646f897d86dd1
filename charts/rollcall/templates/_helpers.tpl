{{/*
Labels on every object's metadata: deploy/'s (kustomize adds part-of) and Helm's own two.
Pod templates and selectors carry only rollcall.selectorLabels, as in deploy/.
*/}}
{{- define "rollcall.labels" -}}
app.kubernetes.io/part-of: rollcall
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The labels that select a component's pods. Argument: the component's name. */}}
{{- define "rollcall.selectorLabels" -}}
app.kubernetes.io/name: rollcall
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* Both, for a component's objects. Argument: (list $ "component"). */}}
{{- define "rollcall.componentLabels" -}}
{{ include "rollcall.selectorLabels" (index . 1) }}
{{ include "rollcall.labels" (index . 0) }}
{{- end }}

{{/* The image of every role, and of the policy servers of PolicyServers without spec.image. */}}
{{- define "rollcall.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
REDIS_URL and the passwords, the one place the roles learn where Redis is and how to log in:
the bundled Service, the bundled Sentinels, or the external URL (any form the roles accept),
inline or from a Secret. The bundled Redis and Sentinels refuse clients without the password
(redis.auth): REDIS_PASSWORD, and REDIS_SENTINEL_PASSWORD for the Sentinels, which the roles
put into the URL; a missing Secret keeps the pods from starting.
*/}}
{{- define "rollcall.redisEnv" -}}
- name: REDIS_URL
{{- if eq .Values.redis.mode "bundled" }}
  value: redis://rollcall-redis:6379
{{- else if eq .Values.redis.mode "sentinel" }}
  # rollcall finds the primary through the Sentinels and follows every failover.
  value: {{ include "rollcall.sentinelUrl" . }}
{{- else if .Values.redis.external.urlSecret.name }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.external.urlSecret.name }}
      key: {{ .Values.redis.external.urlSecret.key }}
{{- else }}
  value: {{ required "redis.mode is external: set redis.external.url (redis://host:6379/0) or redis.external.urlSecret.name" .Values.redis.external.url | quote }}
{{- end }}
{{- if or (ne .Values.redis.mode "external") .Values.redis.auth.existingSecret }}
# Redis' password (redis.auth).
- name: REDIS_PASSWORD
  {{- include "rollcall.redisPasswordRef" . | nindent 2 }}
{{- end }}
{{- if eq .Values.redis.mode "sentinel" }}
# The Sentinels' password: the same.
- name: REDIS_SENTINEL_PASSWORD
  {{- include "rollcall.redisPasswordRef" . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The password of the bundled Redis and Sentinels: the key of redis.auth.existingSecret, or of
the Secret rollcall-redis the chart makes (redis.yaml).
*/}}
{{- define "rollcall.redisPasswordRef" -}}
{{- $auth := .Values.redis.auth -}}
valueFrom:
  secretKeyRef:
    name: {{ $auth.existingSecret | default "rollcall-redis" }}
    key: {{ ternary $auth.existingSecretKey "password" (ne $auth.existingSecret "") }}
{{- end }}

{{/* The bundled Sentinels (their pods' names under the headless Service) and the group's name. */}}
{{- define "rollcall.sentinelUrl" -}}
{{- $addresses := list }}
{{- range until (int .Values.redis.sentinel.sentinels) }}
{{- $addresses = append $addresses (printf "rollcall-redis-sentinel-%d.rollcall-redis-sentinel:26379" .) }}
{{- end -}}
redis+sentinel://{{ join "," $addresses }}/{{ .Values.redis.sentinel.masterName }}
{{- end }}

{{/*
The pod-level fields of the bundled Redis and of the Sentinels: no API token, no service
links, the redis user of the official image. Argument: the chart's context.
*/}}
{{- define "rollcall.redisPodSecurity" -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  runAsNonRoot: true
  # The redis user of the official image.
  runAsUser: 999
  runAsGroup: 999
  fsGroup: 999
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/*
Keeps a component's pods on different nodes (redis.sentinel.podAntiAffinity): soft, where the
scheduler can; hard, always (a pod stays Pending without a node of its own). Argument:
(list $ "component").
*/}}
{{- define "rollcall.podAntiAffinity" -}}
{{- $selector := include "rollcall.selectorLabels" (index . 1) -}}
affinity:
  podAntiAffinity:
    {{- if eq (index . 0).Values.redis.sentinel.podAntiAffinity "hard" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- $selector | nindent 12 }}
    {{- else }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- $selector | nindent 14 }}
    {{- end }}
{{- end }}

{{/*
A role's Deployment, Service and PodDisruptionBudget, as deploy/watcher.yaml and
deploy/worker.yaml have them. Argument: a dict with
  root      the chart's context ($)
  role      watcher | worker (the container, the command, the ServiceAccount)
  values    .Values.<role>
  replicas  the Deployment's replicas, or nil to leave them to an autoscaler
  env       the name of the template that renders the role's own environment (a YAML list, from
            the chart's context), between the common variables and the UI's
  budget    the PodDisruptionBudget's spec without its selector (YAML)
*/}}
{{- define "rollcall.role" -}}
{{- $ := .root -}}
{{- $name := printf "rollcall-%s" .role -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "rollcall.componentLabels" (list $ .role) | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" .replicas) }}
  replicas: {{ .replicas }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "rollcall.selectorLabels" .role | nindent 6 }}
  strategy:
    # Replace one replica at a time so a leader (or a ready standby) is always there.
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
  template:
    metadata:
      labels:
        {{- include "rollcall.selectorLabels" .role | nindent 8 }}
    spec:
      serviceAccountName: {{ $name }}
      enableServiceLinks: false
      {{- with $.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # SIGTERM → the role finishes its current work (a worker its jobs, a leader releases
      # its Lease) before exiting.
      terminationGracePeriodSeconds: 30
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
        runAsGroup: 1000
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .role }}
          image: {{ include "rollcall.image" $ }}
          {{- with $.Values.image.pullPolicy }}
          imagePullPolicy: {{ . }}
          {{- end }}
          # The image's entrypoint is `node cli/rollcall.ts`: the same command the tests run.
          args: [{{ .role }}]
          env:
            - name: PORT
              value: '8080'
            {{- include "rollcall.redisEnv" $ | nindent 12 }}
            # rollcall's namespace is wherever it was installed.
            - name: ROLLCALL_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: LOG_LEVEL
              value: {{ $.Values.logLevel | quote }}
            # V8 sized for the work, under the 512Mi limit: a small young generation (its
            # default grows to 32 MiB semi-spaces on big nodes; the worker's are 8 MiB, with
            # which a storm takes 11-17 % less CPU than with the watcher's 2: bench/RESULTS.md)
            # and an old generation bound that makes V8 collect instead of growing. The bench
            # runs rollcall with the same options as deploy/ (bench/support.ts).
            - name: NODE_OPTIONS
              value: --max-semi-space-size={{ .semiSpaceMiB }} --max-old-space-size=256
            {{- include .env $ | trim | nindent 12 }}
            - name: ROLLCALL_UI_CREDENTIALS
              valueFrom:
                secretKeyRef:
                  name: {{ $.Values.ui.existingSecret }}
                  key: {{ $.Values.ui.existingSecretKey }}
                  optional: true
          ports:
            - name: http
              containerPort: 8080
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 5
            failureThreshold: 2
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
---
# Probes, /metrics and the queue UI (when its Secret is set).
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "rollcall.componentLabels" (list $ .role) | nindent 4 }}
spec:
  selector:
    {{- include "rollcall.selectorLabels" .role | nindent 4 }}
  ports:
    - name: http
      port: 8080
      targetPort: http
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "rollcall.labels" $ | nindent 4 }}
spec:
  {{- .budget | trim | nindent 2 }}
  selector:
    matchLabels:
      {{- include "rollcall.selectorLabels" .role | nindent 6 }}
{{- end }}
