{{- define "name" -}}
gardener-extension-node
{{- end -}}

{{- define "labels" -}}
app.kubernetes.io/name: {{ include "name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "imagevector-overwrite" -}}
{{- if .Values.imageVectorOverwrite }}{{ toYaml .Values.imageVectorOverwrite }}{{ end -}}
{{- end -}}

{{- define "controllers" -}}
{{- $list := list -}}
{{- if .Values.controllers.containerRuntime.enabled }}{{ $list = append $list "containerruntime" }}{{ end -}}
{{- if .Values.controllers.operatingSystemConfig.enabled }}{{ $list = append $list "operatingsystemconfig" }}{{ end -}}
{{- if .Values.controllers.worker.enabled }}{{ $list = append $list "worker" }}{{ end -}}
{{- join "," $list -}}
{{- end -}}
