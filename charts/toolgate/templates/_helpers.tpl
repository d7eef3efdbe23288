{{/* Name of the chart, overridable. */}}
{{- define "toolgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-based unless overridden; never "toolgate-toolgate". */}}
{{- define "toolgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the controller pods; never change them on upgrade. */}}
{{- define "toolgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "toolgate.labels" -}}
helm.sh/chart: {{ include "toolgate.chart" . }}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolgate
{{- end -}}

{{- define "toolgate.serviceAccountName" -}}
{{- default (include "toolgate.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The image of controller and webhook: repository@digest or repository:tag. */}}
{{- define "toolgate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.sidecarImage" -}}
{{- default (include "toolgate.image" .) .Values.sidecar.image -}}
{{- end -}}

{{- define "toolgate.databaseSecret" -}}
{{- if and .Values.database.existingSecret .Values.database.url -}}
{{- fail "database: set either existingSecret or url, not both" -}}
{{- end -}}
{{- default (printf "%s-database" (include "toolgate.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{/* The central approvals queue, or "" when each approval lives in its
tenant's namespace (the default). */}}
{{- define "toolgate.approvalsNamespace" -}}
{{- .Values.approvalsNamespace | default "" -}}
{{- end -}}

{{/* The username the controller (and so the webhook container beside it)
authenticates as: only it may create request Approvals. */}}
{{- define "toolgate.controllerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "toolgate.serviceAccountName" .) -}}
{{- end -}}

{{/* Webhook Service name and the DNS names its certificate must carry. */}}
{{- define "toolgate.webhookService" -}}
{{- printf "%s-webhook" (include "toolgate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "toolgate.webhookDNSNames" -}}
{{- $svc := include "toolgate.webhookService" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{- define "toolgate.tlsSecret" -}}
{{- printf "%s-webhook-tls" (include "toolgate.fullname" .) -}}
{{- end -}}

{{- define "toolgate.certificate" -}}
{{- printf "%s-webhook" (include "toolgate.fullname" .) -}}
{{- end -}}

{{/* Restricted (Pod Security Standard) container security context. */}}
{{- define "toolgate.containerSecurityContext" -}}
runAsNonRoot: true
{{- if not (kindIs "invalid" .Values.runAsUser) }}
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsUser }}
{{- end }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
What `checksum/database` hashes, so that a new database reaches the
controller through a rollout without the hash ever covering a password:
- `existingSecret`: its name and, when the API server can be asked
  (`helm install/upgrade`, not `helm template`), its resourceVersion, which
  changes with every write of the Secret, rotations included;
- `url`: the URL with its password removed. Changing only the password in
  `database.url` does not restart the controller: run
  `kubectl rollout restart deployment/<fullname>` after such an upgrade.
*/}}
{{- define "toolgate.databaseChecksum" -}}
{{- $source := "" -}}
{{- if .Values.database.existingSecret -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.database.existingSecret -}}
{{- $version := "" -}}
{{- if $secret }}{{ $version = $secret.metadata.resourceVersion }}{{ end -}}
{{- $source = printf "secret|%s|%s" .Values.database.existingSecret $version -}}
{{- else if .Values.database.url -}}
{{- $u := urlParse .Values.database.url -}}
{{- $user := regexReplaceAll ":.*$" (get $u "userinfo") "" -}}
{{- $source = printf "url|%s://%s@%s%s?%s" (get $u "scheme") $user (get $u "host") (get $u "path") (get $u "query") -}}
{{- end -}}
{{- $source | sha256sum | trunc 16 -}}
{{- end -}}

{{/*
The OTEL_* variables of a component that exports traces (none unless
tracing.otlpEndpoint is set). Call with (dict "root" . "service" NAME).
*/}}
{{- define "toolgate.otelEnv" -}}
{{- with .root.Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ $.service | quote }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $.root.Values.tracing.sampleRatio | toString | quote }}
{{- end }}
{{- end }}

{{/* Base URL of the wake-up relay the sidecars use: sidecar.wakeupsUrl, else
the chart's own relay when enabled, else none (empty). */}}
{{- define "toolgate.wakeupsUrl" -}}
{{- if .Values.sidecar.wakeupsUrl -}}
{{- .Values.sidecar.wakeupsUrl -}}
{{- else if .Values.wakeupsRelay.enabled -}}
{{- printf "http://%s-wakeups.%s.svc:%v" (include "toolgate.fullname" .) .Release.Namespace .Values.wakeupsRelay.port -}}
{{- end -}}
{{- end }}
