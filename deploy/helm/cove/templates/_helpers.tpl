{{/* The release's prefix of every object's name. */}}
{{- define "cove.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cove.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* cove.selector takes (list . "component"). */}}
{{- define "cove.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "cove.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret and key of the database URL; one of them is required. */}}
{{- define "cove.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else if .Values.database.url -}}
{{- printf "%s-database" (include "cove.fullname" .) -}}
{{- else -}}
{{- fail "database: set database.existingSecret (a Secret holding the postgres:// URL) or database.url" -}}
{{- end -}}
{{- end -}}

{{- define "cove.databaseKey" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecretKey }}{{- else -}}url{{- end -}}
{{- end -}}

{{/* The Secret and key of the join token, "" when none is given. */}}
{{- define "cove.joinTokenSecret" -}}
{{- if .Values.joinToken.existingSecret -}}
{{- .Values.joinToken.existingSecret -}}
{{- else if .Values.joinToken.value -}}
{{- printf "%s-join-token" (include "cove.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "cove.joinTokenKey" -}}
{{- if .Values.joinToken.existingSecret -}}{{ .Values.joinToken.existingSecretKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "cove.secretsKeySecret" -}}
{{- if .Values.secretsKey.existingSecret -}}
{{- .Values.secretsKey.existingSecret -}}
{{- else -}}
{{- printf "%s-secrets-key" (include "cove.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "cove.secretsKeyKey" -}}
{{- if .Values.secretsKey.existingSecret -}}{{ .Values.secretsKey.existingSecretKey }}{{- else -}}key{{- end -}}
{{- end -}}

{{- define "cove.saves" -}}
{{- if not (hasPrefix "s3://" .Values.saves.url) -}}
{{- fail "saves.url: set the save store every node and the control plane share, s3://BUCKET/PREFIX?endpoint=URL" -}}
{{- end -}}
{{- .Values.saves.url -}}
{{- end -}}
