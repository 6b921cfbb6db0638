{{- define "name" -}}
gardener-extension-node
{{- end -}}

{{- /*
  Name of cluster-scoped objects (ClusterRole, bindings, admission policy). gardenlet uses the
  ControllerRegistration's name as release name, so the per-component registrations installed
  side by side on one seed never share (and fight over) a cluster-scoped object.
*/ -}}
{{- define "cluster-name" -}}
extensions.gardener.cloud:{{ .Release.Name }}
{{- end -}}

{{- /* The user name the API server sees for the operator's ServiceAccount. */ -}}
{{- define "service-account-user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "name" . }}
{{- end -}}

{{- define "labels" -}}
app.kubernetes.io/name: {{ include "name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "imagevector-overwrite" -}}
{{- if .Values.imageVectorOverwrite }}{{ toYaml .Values.imageVectorOverwrite }}{{ end -}}
{{- end -}}

{{- /*
  The value of --controllers. An empty list would start an operator that reconciles nothing
  and exits with a usage error (a crash-looping pod), so it is refused at template time.
*/ -}}
{{- define "controllers" -}}
{{- $list := list -}}
{{- if .Values.controllers.containerRuntime.enabled }}{{ $list = append $list "containerruntime" }}{{ end -}}
{{- if .Values.controllers.operatingSystemConfig.enabled }}{{ $list = append $list "operatingsystemconfig" }}{{ end -}}
{{- if .Values.controllers.worker.enabled }}{{ $list = append $list "worker" }}{{ end -}}
{{- if not $list -}}
{{- fail "no controller enabled: set at least one of controllers.containerRuntime.enabled, controllers.operatingSystemConfig.enabled, controllers.worker.enabled to true" -}}
{{- end -}}
{{- join "," $list -}}
{{- end -}}

{{- /* The value of --node-agent-secrets, one of auto, always, never. */ -}}
{{- define "node-agent-secrets" -}}
{{- $mode := toString .Values.controllers.operatingSystemConfig.nodeAgentSecrets -}}
{{- if not (has $mode (list "auto" "always" "never")) -}}
{{- fail (printf "controllers.operatingSystemConfig.nodeAgentSecrets must be one of auto, always, never (got %q)" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{- /* Name of the admission policy and its binding (a DNS subdomain, unlike RBAC names). */ -}}
{{- define "policy-name" -}}
{{ .Release.Name }}.extensions.gardener.cloud
{{- end -}}

{{- /* A list of strings as CEL string literals, comma-separated (names cannot hold quotes). */ -}}
{{- define "cel-strings" -}}
{{- $quoted := list -}}
{{- range . }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end -}}
{{- join ", " $quoted -}}
{{- end -}}

{{- /*
  The seed monitoring files of this release: monitoring/seed-rules.yaml and
  monitoring/seed-dashboard.json with __RELEASE__ (the `job` of the pods, prometheus.io/name)
  and __NAMESPACE__ replaced. Plain replacement, not `tpl`: the rules carry Prometheus'
  own `{{ $labels... }}` templates and the dashboard Plutono's `{{kind}}` legends.
*/ -}}
{{- define "seed-rules" -}}
{{ .Files.Get "monitoring/seed-rules.yaml" | replace "__RELEASE__" .Release.Name | replace "__NAMESPACE__" .Release.Namespace }}
{{- end -}}

{{- /* A dashboard uid is at most 40 characters; the release name may be longer. */ -}}
{{- define "seed-dashboard" -}}
{{ .Files.Get "monitoring/seed-dashboard.json" | replace "__RELEASE__" .Release.Name | replace "__UID__" (printf "gen-%s" (.Release.Name | sha256sum | trunc 20)) }}
{{- end -}}
