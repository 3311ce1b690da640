{{/* Names, labels and shared pod settings. */}}
{{- define "mol.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mol.fullname" -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mol.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "mol.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mol-platform
{{- end -}}

{{/* Selector labels of one component: include "mol.selector" (list . "catalog") */}}
{{- define "mol.selector" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "mol.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "mol.image" -}}
{{- $img := index . 0 -}}{{- $ctx := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $ctx.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "mol.catalogName" -}}{{ include "mol.fullname" . }}-catalog{{- end -}}
{{- define "mol.operatorName" -}}{{ include "mol.fullname" . }}-operator{{- end -}}

{{/* In-cluster URL of the catalog (or the external one when catalog.enabled=false). */}}
{{- define "mol.catalogUrl" -}}
{{- if .Values.catalog.enabled -}}
{{- printf "http://%s.%s.svc:%d" (include "mol.catalogName" .) .Release.Namespace (int .Values.catalog.service.port) -}}
{{- else -}}
{{- required "catalog.externalUrl is required when catalog.enabled=false" .Values.catalog.externalUrl -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the catalog admin token (shared by the catalog and the operator). */}}
{{- define "mol.adminTokenSecret" -}}
{{- default (printf "%s-admin-token" (include "mol.fullname" .)) .Values.adminToken.existingSecret -}}
{{- end -}}

{{/*
The generated admin token (base64), decided once per render: the Secret and the
checksums on the catalog's and the operator's pods must see the same value. An
existing Secret's token is kept (`lookup`; empty when rendering offline).
*/}}
{{- define "mol.generatedAdminToken" -}}
{{- if not (hasKey .Values "__adminToken") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "mol.adminTokenSecret" .) -}}
{{- $token := "" -}}
{{- if and $existing $existing.data (index $existing.data .Values.adminToken.key) -}}
{{- $token = index $existing.data .Values.adminToken.key -}}
{{- else -}}
{{- $token = printf "mol_%s" (randAlphaNum 43) | b64enc -}}
{{- end -}}
{{- $_ := set .Values "__adminToken" $token -}}
{{- end -}}
{{- index .Values "__adminToken" -}}
{{- end -}}

{{/*
Pod annotation that rolls a pod when the admin token changes: the generated token's
checksum, or an existing Secret's when the cluster can be asked (helm install/upgrade).
*/}}
{{- define "mol.adminTokenChecksum" -}}
{{- if .Values.adminToken.existingSecret -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.adminToken.existingSecret -}}
{{- if and $secret $secret.data -}}
checksum/admin-token: {{ index $secret.data .Values.adminToken.key | default "" | sha256sum | quote }}
{{- end -}}
{{- else -}}
checksum/admin-token: {{ include "mol.generatedAdminToken" . | sha256sum | quote }}
{{- end -}}
{{- end -}}

{{- define "mol.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mol.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- /*
Least privilege: exactly the kinds the operator reads and renders. It must hold every
permission it grants routers (EndpointSlices), or Kubernetes refuses the Role.
*/}}
{{- define "mol.operatorRules" -}}
- apiGroups: [mol.dev]
  resources: [moldeployments]
  verbs: [get, list, watch, patch, update]
- apiGroups: [mol.dev]
  resources: [moldeployments/status]
  verbs: [get, patch, update]
# Owner references that block deletion need this on the owner (admission plugin).
- apiGroups: [mol.dev]
  resources: [moldeployments/finalizers]
  verbs: [update]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, configmaps, secrets, serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
# Pods to warm; create and delete only because the code harness's sandbox service gets
# them in its Role (session pods), and a Role grants nothing its creator lacks.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors]
  verbs: [get, list, watch, create, patch, delete]
# The code harness with kubernetes-sigs/agent-sandbox: the sessions' SandboxTemplate and
# SandboxWarmPool; claims and sandboxes are what the sandbox service's Role grants.
- apiGroups: [extensions.agents.x-k8s.io]
  resources: [sandboxtemplates, sandboxwarmpools]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [extensions.agents.x-k8s.io]
  resources: [sandboxclaims]
  verbs: [get, list, watch, create, delete]
- apiGroups: [agents.x-k8s.io]
  resources: [sandboxes]
  verbs: [get, list, watch]
{{- if .Values.keda.enabled }}
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
{{- if .Values.kserve.enabled }}
- apiGroups: [serving.kserve.io]
  resources: [llminferenceservices]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
{{- end }}
