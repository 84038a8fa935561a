{{/* Chart name, truncated to a DNS label. */}}
{{- define "inference-capacity.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full object name: <release>-<chart>, or the release name when it contains the chart name. */}}
{{- define "inference-capacity.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "inference-capacity.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "inference-capacity.labels" -}}
helm.sh/chart: {{ include "inference-capacity.chart" . }}
{{ include "inference-capacity.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: inference-capacity
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels: stable across upgrades (never add the version here). */}}
{{- define "inference-capacity.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inference-capacity.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "inference-capacity.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "inference-capacity.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "inference-capacity.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when Kopf peering is on: several replicas, or asked for. */}}
{{- define "inference-capacity.peering" -}}
{{- if or .Values.peering.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/* "true" when the InferenceCapacities are sharded over a StatefulSet (shards > 1). */}}
{{- define "inference-capacity.sharded" -}}
{{- if gt (int .Values.shards) 1 }}
{{- if or .Values.peering.enabled (gt (int .Values.replicaCount) 1) }}
{{- fail "shards > 1 runs one standalone replica per shard, coordinated by the shard Leases: leave replicaCount at 1 and peering.enabled false" }}
{{- end -}}
true
{{- end }}
{{- end }}

{{/* "true" in namespace-scoped mode. */}}
{{- define "inference-capacity.namespaced" -}}
{{- if .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
Container resources: .Values.resources, with the memory request and limit from fleetSize when it
is above 0 (request = 160Mi + 0.04Mi per resource, limit = max(512Mi, 1.5 x request); fitted on
benchmarks/reconcile.py --cluster real at 1,000 and 10,000, docs/install.md "Memory").
*/}}
{{- define "inference-capacity.resources" -}}
{{- $res := deepCopy (.Values.resources | default dict) -}}
{{- $n := int (.Values.fleetSize | default 0) -}}
{{- if gt $n 0 -}}
{{- $request := add 160 (div $n 25) -}}
{{- $limit := max 512 (div (mul $request 3) 2) -}}
{{- $_ := set $res "requests" (merge (dict "memory" (printf "%dMi" $request)) (omit ($res.requests | default dict) "memory")) -}}
{{- $_ := set $res "limits" (merge (dict "memory" (printf "%dMi" $limit)) (omit ($res.limits | default dict) "memory")) -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}
