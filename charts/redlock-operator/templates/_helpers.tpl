{{/* Names and labels shared by every template. */}}

{{- define "redlock-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "redlock-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "redlock-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: stable across upgrades. */}}
{{- define "redlock-operator.selectorLabels" -}}
app.kubernetes.io/name: redlock-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "redlock-operator.labels" -}}
{{ include "redlock-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "redlock-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Rules between values that the JSON schema cannot express; the operator refuses the
same combinations at start, this only says so at install time. */}}
{{- define "redlock-operator.validate" -}}
{{- $le := .Values.leaderElection -}}
{{- if ge (int $le.renewDeadlineMs) (mul (int $le.leaseDurationSeconds) 1000) -}}
{{- fail "leaderElection.renewDeadlineMs must be shorter than leaderElection.leaseDurationSeconds" -}}
{{- end -}}
{{- if ge (mulf (float64 $le.retryPeriodMs) 1.2) (float64 $le.renewDeadlineMs) -}}
{{- fail "leaderElection.retryPeriodMs x 1.2 must be shorter than leaderElection.renewDeadlineMs" -}}
{{- end -}}
{{- end -}}
