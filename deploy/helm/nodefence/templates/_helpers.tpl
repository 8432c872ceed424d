{{/* The objects' base name. */}}
{{- define "nodefence.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains "nodefence" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-nodefence" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects this release's pods. app.kubernetes.io/name is the scrape job's name
(PodMonitor jobLabel), which the NodefenceDown rule expects to be nodefence. */}}
{{- define "nodefence.selectorLabels" -}}
app.kubernetes.io/name: nodefence
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nodefence.labels" -}}
{{ include "nodefence.selectorLabels" . }}
app.kubernetes.io/part-of: nodefence
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nodefence.receiverLabels" -}}
{{ include "nodefence.selectorLabels" . }}
app.kubernetes.io/component: receiver
{{- end -}}

{{- define "nodefence.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The policy file's text: the values' (text or YAML) or the shipped one. */}}
{{- define "nodefence.policy" -}}
{{- if kindIs "string" .Values.policy -}}
{{- .Values.policy | default (.Files.Get "files/policy.yaml") -}}
{{- else -}}
{{- toYaml .Values.policy -}}
{{- end -}}
{{- end -}}

{{- define "nodefence.knative" -}}
{{- eq .Values.mode "knative" -}}
{{- end -}}

{{/* Whether the reconcile CronJob is rendered: null follows the mode. */}}
{{- define "nodefence.cronjob" -}}
{{- if kindIs "invalid" .Values.reconcileCronJob.enabled -}}
{{- eq .Values.mode "knative" -}}
{{- else -}}
{{- .Values.reconcileCronJob.enabled -}}
{{- end -}}
{{- end -}}

{{/* The environment every nodefence container shares (after its own first entries). */}}
{{- define "nodefence.commonEnv" -}}
- name: NODEFENCE_POLICY_FILE
  value: /etc/nodefence/policy/policy.yaml
- name: NODEFENCE_LOG_FORMAT
  value: json
{{- end -}}

{{- define "nodefence.tailEnv" -}}
{{- if .Values.bmcInventory.enabled }}
- name: NODEFENCE_BMC_INVENTORY
  value: /etc/nodefence/bmc/{{ .Values.bmcInventory.key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "nodefence.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "nodefence.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The read-only mounts every nodefence container has: the policy in a directory of its own
(a ConfigMap volume is read-only, so no other volume could be mounted inside it), and the
BMC inventory. */}}
{{- define "nodefence.policyMount" -}}
- name: policy
  mountPath: /etc/nodefence/policy
  readOnly: true
{{- end -}}

{{- define "nodefence.bmcMount" -}}
{{- if .Values.bmcInventory.enabled }}
- name: bmc-inventory
  mountPath: /etc/nodefence/bmc
  readOnly: true
{{- end }}
{{- end -}}

{{- define "nodefence.policyVolume" -}}
- name: policy
  configMap:
    name: {{ include "nodefence.fullname" . }}-policy
{{- end -}}

{{/* The BMC inventory's volume. With a pod-level fsGroup (Deployment, CronJob) the kubelet
gives the files to group 10001 and 0440 (288) lets only user 10001 read them; Knative admits no
fsGroup by default, so there the files stay root's and 0444 (292) keeps them readable. */}}
{{- define "nodefence.bmcVolume" -}}
{{- if .root.Values.bmcInventory.enabled }}
- name: bmc-inventory
  secret:
    secretName: {{ .root.Values.bmcInventory.existingSecret }}
    defaultMode: {{ .mode }}
{{- end }}
{{- end -}}

{{- define "nodefence.envFrom" -}}
- secretRef:
    name: {{ .Values.existingSecret }}
{{- end -}}

{{/* Labels on the monitoring objects each stack selects by. */}}
{{- define "nodefence.stackLabels" -}}
{{- if eq .Values.monitoring.stack "kube-prometheus-stack" }}
release: {{ required "monitoring.release: kube-prometheus-stack's release name" .Values.monitoring.release }}
{{- end }}
{{- end -}}

{{/* The pods' PriorityClass: the chart's own, or an existing one, or none. */}}
{{- define "nodefence.priorityClassName" -}}
{{- if .Values.priorityClass.create -}}
{{- include "nodefence.fullname" . }}-critical
{{- else -}}
{{- .Values.priorityClassName -}}
{{- end -}}
{{- end -}}

{{- define "nodefence.topologySpread" -}}
{{- $t := .Values.topologySpread -}}
- maxSkew: {{ $t.maxSkew }}
  topologyKey: {{ $t.topologyKey }}
  whenUnsatisfiable: {{ $t.whenUnsatisfiable }}
  {{- with $t.nodeAffinityPolicy }}
  nodeAffinityPolicy: {{ . }}
  {{- end }}
  {{- with $t.nodeTaintsPolicy }}
  nodeTaintsPolicy: {{ . }}
  {{- end }}
  labelSelector:
    matchLabels:
      {{- include "nodefence.receiverLabels" . | nindent 6 }}
{{- end -}}

{{/* The webhook over TLS (mode deployment): the Secret with tls.crt, tls.key and ca.crt. */}}
{{- define "nodefence.tls" -}}
{{- and .Values.tls.enabled (not (eq (include "nodefence.knative" .) "true")) -}}
{{- end -}}

{{- define "nodefence.tlsSecret" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "nodefence.fullname" .)) -}}
{{- end -}}
