{{- /*
RBAC rules: the single source of truth of what the operator may do. The kustomize base
(manifests/base/rbac.yaml and manifests/overlays/namespace-scoped/) carries the same rules;
tests/test_packaging_rbac.py renders both and fails when they differ.

"inference-capacity.rules.namespaced": what the controller does inside a watched namespace.
"inference-capacity.rules.cluster":    cluster-scoped resources (and cluster-wide reads).
Cluster-wide mode: one ClusterRole = namespaced + cluster rules.
Namespace-scoped mode: a Role per watched namespace = namespaced rules; a ClusterRole = cluster
rules (CRD scanning, plus nodes and pods when rbac.spareGpuCounting).
*/ -}}
{{- define "inference-capacity.rules.namespaced" -}}
# The InferenceCapacity objects: Kopf patches finalizers and annotations on them.
- apiGroups: ["capacity.inference.dev"]
  resources: ["inferencecapacities"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["capacity.inference.dev"]
  resources: ["inferencecapacities/status"]
  verbs: ["get", "patch"]
# The PDB it creates is owned by the InferenceCapacity with blockOwnerDeletion; clusters with the
# OwnerReferencesPermissionEnforcement admission plugin require this to set that reference.
- apiGroups: ["capacity.inference.dev"]
  resources: ["inferencecapacities/finalizers"]
  verbs: ["update"]
# The vLLM Deployments it sizes (flags, replicas, rolling-update settings).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "patch"]
# The PodDisruptionBudget it keeps per target (deleted by garbage collection through its
# owner reference, never by the operator).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# HPAs targeting the same Deployment (replicas are left to them). Cluster-wide installs keep
# PDBs and HPAs in watch-fed caches (one list, then a watch per kind).
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list", "watch"]
# model.configMapRef: a real config.json.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
# vLLM's startup lines (spec.policy.observeStartup): the target's pods, one per pod-template
# hash, and the first 256 KiB of their vLLM container's log (pods/log get only).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
{{- with .Values.rbac.secretNames }}
# workload.fromPrometheus bearer tokens: only the Secrets named in rbac.secretNames (and the
# operator uses one only if it carries capacity.inference.dev/prometheus-token: "true").
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
# Events for every applied change and refusal (Kopf posts core/v1 events).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if and (include "inference-capacity.peering" .) (include "inference-capacity.namespaced" .) }}
# Kopf peering between replicas (namespace-scoped operators use KopfPeering).
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{- define "inference-capacity.rules.cluster" -}}
{{- if or (not (include "inference-capacity.namespaced" .)) .Values.rbac.spareGpuCounting }}
# Spare-GPU counting: Node allocatable and Pod requests of nvidia.com/gpu, cluster-wide, from
# watch-fed caches (one list, then a watch per kind).
- apiGroups: [""]
  resources: ["nodes", "pods"]
  verbs: ["list", "watch"]
{{- end }}
# Kopf: scanning CustomResourceDefinitions (resources appearing and disappearing).
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- if and (include "inference-capacity.peering" .) (not (include "inference-capacity.namespaced" .)) }}
# Kopf peering between replicas (cluster-wide operators use ClusterKopfPeering).
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}
