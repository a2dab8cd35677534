{{/* Names, labels and the shared pieces of every workload. */}}

{{- define "gpufleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpufleet.fullname" -}}
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

{{/* A component's name: <fullname>-<component>, at most 63 characters (a Service's
limit, and a label's: its job). A long fullname is cut, never the component: cutting the
component gave components one name, and the autoscaler's job a name the alerts did not
know. Call with (list $ "exporter"). */}}
{{- define "gpufleet.component" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $room := sub 62 (len $component) | int -}}
{{- printf "%s-%s" (include "gpufleet.fullname" $root | trunc $room | trimSuffix "-") $component -}}
{{- end -}}

{{- define "gpufleet.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "gpufleet.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gpufleet.labels" -}}
{{- $root := index . 0 -}}
{{ include "gpufleet.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpufleet.image" -}}
{{- if contains "k8s-device-plugin" .Values.image.repository -}}
{{- fail (printf "image.repository is %s, NVIDIA's device plugin's (an NVIDIA values file carried over?): image is gpufleet's one image for all three daemons; NVIDIA's config-manager has configManager.image" .Values.image.repository) -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Every container: no privilege escalation, no capabilities, a read-only root. */}}
{{- define "gpufleet.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* A pod that can run as the image's non-root user (65532). */}}
{{- define "gpufleet.nonRootPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A pod that needs root's ownership of host files (kubelet sockets); still no
capabilities, so root here cannot bypass file permissions (no CAP_DAC_OVERRIDE). */}}
{{- define "gpufleet.rootPod" -}}
runAsNonRoot: false
runAsUser: 0
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The DaemonSets' node affinity: the values' affinity, plus the node autoscaler's GPU
node labels (nodes it has just created carry no NFD labels yet). */}}
{{- define "gpufleet.gpuNodeAffinity" -}}
{{- $affinity := deepCopy (default dict .Values.affinity) -}}
{{- /* key -> the values a GPU node has (none: the key exists); Karpenter's manufacturer
label also names AMD GPUs (g4ad), where NVML cannot start */ -}}
{{- $keys := dict "karpenter" (dict "karpenter.k8s.aws/instance-gpu-manufacturer" (list "nvidia")) "cluster-autoscaler" (dict "cloud.google.com/gke-accelerator" list "k8s.amazonaws.com/accelerator" list) -}}
{{- $required := dig "nodeAffinity" "requiredDuringSchedulingIgnoredDuringExecution" dict $affinity -}}
{{- if and $required.nodeSelectorTerms (hasKey $keys .Values.nodeAutoscaler) -}}
{{- range $key, $values := (get $keys .Values.nodeAutoscaler) -}}
{{- $term := dict "key" $key "operator" "Exists" -}}
{{- if $values }}{{ $term = dict "key" $key "operator" "In" "values" $values }}{{ end -}}
{{- $_ := set $required "nodeSelectorTerms" (append $required.nodeSelectorTerms (dict "matchExpressions" (list $term))) -}}
{{- end -}}
{{- end -}}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod settings both DaemonSets share (NVIDIA's chart's). */}}
{{- define "gpufleet.daemonSetPod" -}}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- include "gpufleet.gpuNodeAffinity" . }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Whether the plugin reads a config (NVIDIA's "hasConfigMap"): then the config-manager
init container and sidecar run. */}}
{{- define "gpufleet.pluginConfigMapName" -}}
{{- if .Values.config.name -}}
{{- .Values.config.name -}}
{{- else if .Values.config.map -}}
{{- include "gpufleet.component" (list . "plugin-configs") -}}
{{- end -}}
{{- end -}}

{{/* "true" where a config may share GPUs with MPS: an external config (config.name), or a
config.map entry with sharing.mps. Only then does the MPS control daemon run: without a
config, nothing can ask for MPS. */}}
{{- define "gpufleet.pluginMayServeMps" -}}
{{- if .Values.config.name -}}
true
{{- else -}}
{{- $any := false -}}
{{- range $_, $contents := .Values.config.map -}}
{{- $sharing := ($contents | fromYaml).sharing -}}
{{- if and $sharing $sharing.mps }}{{ $any = true }}{{ end -}}
{{- end -}}
{{- if $any }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* "true" where the plugin may serve MIG devices, as NVIDIA's chart means to decide it
(allPossibleMigStrategiesAreNone): a migStrategy other than none; or, with none given, an
external config (which may set one), or a config.map entry whose flags set one other than
none. (NVIDIA's never reads the entries: any config.map counts there.) Its container then
gets the MIG monitor devices and SYS_ADMIN, as NVIDIA's does: NVML answers "Insufficient
Permissions" on MIG devices without them. */}}
{{- define "gpufleet.pluginMayServeMig" -}}
{{- if .Values.migStrategy -}}
{{- if ne .Values.migStrategy "none" }}true{{ end -}}
{{- else if .Values.config.name -}}
true
{{- else -}}
{{- $any := false -}}
{{- range $_, $contents := .Values.config.map -}}
{{- $flags := ($contents | fromYaml).flags -}}
{{- if and $flags (ne (toString $flags.migStrategy) "none") }}{{ $any = true }}{{ end -}}
{{- end -}}
{{- if $any }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* The Prometheus Operator's API, served by the cluster (or given with --api-versions). */}}
{{- define "gpufleet.hasPrometheusOperator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* NVIDIA's config-manager container (its env as NVIDIA's chart sets it); call with
(list $ "true") for the one-shot init container, (list $ "false") for the sidecar. */}}
{{- define "gpufleet.configManager" -}}
{{- $root := index . 0 -}}
{{- $oneshot := index . 1 -}}
{{- $cm := $root.Values.configManager -}}
{{- /* the process it sends SIGHUP: the plugin's, unless a third item names another */ -}}
{{- $signalled := $cm.processToSignal -}}
{{- if gt (len .) 2 }}{{ $signalled = index . 2 }}{{ end -}}
image: {{ printf "%s:%s" $cm.image.repository $cm.image.tag }}
imagePullPolicy: {{ $cm.image.pullPolicy }}
command: ["config-manager"]
env:
  - name: ONESHOT
    value: {{ $oneshot | quote }}
  - name: KUBECONFIG
    value: ""
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
  - name: NODE_LABEL
    value: nvidia.com/device-plugin.config
  - name: CONFIG_FILE_SRCDIR
    value: /available-configs
  - name: CONFIG_FILE_DST
    value: /config/config.yaml
  - name: DEFAULT_CONFIG
    value: {{ $root.Values.config.default | quote }}
  - name: FALLBACK_STRATEGIES
    value: {{ join "," $root.Values.config.fallbackStrategies | quote }}
  - name: SEND_SIGNAL
    value: {{ ternary "false" "true" (eq $oneshot "true") | quote }}
  - name: SIGNAL
    value: {{ ternary "" "1" (eq $oneshot "true") | quote }}
  - name: PROCESS_TO_SIGNAL
    value: {{ ternary "" $signalled (eq $oneshot "true") | quote }}
securityContext:
  {{- include "gpufleet.containerSecurity" $root | nindent 2 }}
{{- with $cm.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumeMounts:
  - name: available-configs
    mountPath: /available-configs
  - name: config
    mountPath: /config
{{- end -}}

{{/* --web-config-file from a daemon's webConfig value (exporter.webConfig,
devicePlugin.webConfig): its flag, its mount and its volume, each empty without a secret.
Call with the value; a secret's files sit beside the web config, as its relative paths
expect. */}}
{{- define "gpufleet.webConfigArg" -}}
{{- if .secret -}}
- --web-config-file=/etc/gpufleet/web/web-config.yml
{{- end -}}
{{- end -}}

{{- define "gpufleet.webConfigMount" -}}
{{- if .secret -}}
- name: web-config
  mountPath: /etc/gpufleet/web
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "gpufleet.webConfigVolume" -}}
{{- if .secret -}}
- name: web-config
  secret:
    secretName: {{ .secret }}
{{- end -}}
{{- end -}}
