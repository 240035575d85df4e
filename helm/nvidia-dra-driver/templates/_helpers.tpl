{{/*
Shared names, labels, images, and the IMEX mode / isolation / feature gate logic.
The validation here mirrors core/computedomain/modes.py and core/gates.py word for word: an invalid
combination fails `helm install` with the same message the apps would log at startup.
*/}}

{{/*
The base of every object name and of the app.kubernetes.io/name label. Pinned to the chart's
former name (it was compute-domain-dra-driver before it grew the GPU half), not .Chart.Name, so
that renaming the chart renames no object: a DaemonSet's selector is immutable, and upgrades
and RBAC subjects keep pointing at the same names.
*/}}
{{- define "cdd.baseName" -}}compute-domain-dra-driver{{- end -}}

{{- define "cdd.name" -}}
{{- default (include "cdd.baseName" .) .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cdd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default (include "cdd.baseName" .) .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cdd.namespace" -}}
{{- .Release.Namespace -}}
{{- end -}}

{{- define "cdd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cdd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cdd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cdd.labels" -}}
helm.sh/chart: {{ include "cdd.chart" . }}
{{ include "cdd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Object names, one per component. */}}
{{- define "cdd.controllerName" -}}{{ include "cdd.fullname" . | trunc 52 | trimSuffix "-" }}-controller{{- end -}}
{{- define "cdd.kubeletPluginName" -}}{{ include "cdd.fullname" . | trunc 48 | trimSuffix "-" }}-kubelet-plugin{{- end -}}
{{- define "cdd.daemonName" -}}{{ include "cdd.fullname" . | trunc 56 | trimSuffix "-" }}-daemon{{- end -}}
{{- define "cdd.webhookName" -}}{{ include "cdd.fullname" . | trunc 55 | trimSuffix "-" }}-webhook{{- end -}}
{{- define "cdd.preflightName" -}}{{ include "cdd.fullname" . | trunc 53 | trimSuffix "-" }}-preflight{{- end -}}

{{/*
Image of a component: call with (dict "root" $ "image" .Values.<component>.image).
Empty fields fall back to the global `image`, the tag finally to the chart's appVersion.
*/}}
{{- define "cdd.image" -}}
{{- $root := .root -}}
{{- $img := .image | default dict -}}
{{- $repo := $img.repository | default $root.Values.image.repository -}}
{{- $tag := $img.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{- define "cdd.imagePullPolicy" -}}
{{- $img := .image | default dict -}}
{{- $img.pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/* ------------------------------------------------------------ the two halves */}}

{{/* "true" when the ComputeDomain half (compute-domain.nvidia.com) is installed, else empty. */}}
{{- define "cdd.computeDomains" -}}
{{- if .Values.resources.computeDomains.enabled -}}true{{- end -}}
{{- end -}}

{{/* "true" when the GPU half (gpu.nvidia.com) is installed, else empty. Off by default, as upstream. */}}
{{- define "cdd.gpus" -}}
{{- if (.Values.resources.gpus | default dict).enabled -}}true{{- end -}}
{{- end -}}

{{/* "true" when gate PassthroughSupport is on (VFIO devices, their DeviceClass, /sys read-write). */}}
{{- define "cdd.passthrough" -}}
{{- if (include "cdd.effectiveGates" . | fromJson).PassthroughSupport -}}true{{- end -}}
{{- end -}}

{{/* ------------------------------------------------------------ IMEX mode and isolation */}}

{{- define "cdd.mode" -}}
{{- .Values.resources.computeDomains.imex.mode | default "driverManaged" -}}
{{- end -}}

{{/* "true" in host-managed mode, empty otherwise (usable in `if`). */}}
{{- define "cdd.hostManaged" -}}
{{- if eq (include "cdd.mode" .) "hostManaged" -}}true{{- end -}}
{{- end -}}

{{/* The isolation the apps run with: empty means the mode's default (domain for driverManaged,
channel for hostManaged). */}}
{{- define "cdd.isolation" -}}
{{- $iso := .Values.resources.computeDomains.imex.isolation | default "" -}}
{{- if ne $iso "" -}}{{ $iso }}
{{- else if eq (include "cdd.mode" .) "driverManaged" -}}domain
{{- else -}}channel{{- end -}}
{{- end -}}

{{/* "true" under host-managed channel isolation (one IMEX channel per ComputeDomain). */}}
{{- define "cdd.channelIsolation" -}}
{{- if and (include "cdd.hostManaged" .) (eq (include "cdd.isolation" .) "channel") -}}true{{- end -}}
{{- end -}}

{{/* Channel isolation sizes; the apps' defaults (2048, 8) when the values leave them out. */}}
{{- define "cdd.channelsMax" -}}
{{- $c := .Values.resources.computeDomains.imex.channels | default dict -}}
{{- $c.max | default 2048 | int -}}
{{- end -}}
{{- define "cdd.channelSlots" -}}
{{- $c := .Values.resources.computeDomains.imex.channels | default dict -}}
{{- $c.slotsPerNode | default 8 | int -}}
{{- end -}}

{{/* ------------------------------------------------------------ feature gates */}}

{{/*
Gates the user set, as JSON {name: bool}. A gate is on only when its value prints as "true", so
`--set-string featureGates.X=false` (the string "false") stays off. The upstream alias
HostManagedIMEXDaemon becomes HostManagedIMEX; when both are set, HostManagedIMEX wins.
*/}}
{{- define "cdd.explicitGates" -}}
{{- $gates := .Values.featureGates | default dict -}}
{{- $out := dict -}}
{{- range $name, $value := $gates -}}
{{- $on := eq (toString $value) "true" -}}
{{- if eq $name "HostManagedIMEXDaemon" -}}
{{- if not (hasKey $gates "HostManagedIMEX") -}}{{- $_ := set $out "HostManagedIMEX" $on -}}{{- end -}}
{{- else -}}
{{- $_ := set $out $name $on -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Every known gate with its effective value (upstream defaults, then user values, then the hostManaged overrides). */}}
{{- define "cdd.effectiveGates" -}}
{{- $g := dict "ComputeDomainCliques" true "CrashOnNVLinkFabricErrors" true "HostManagedIMEX" false "IMEXDaemonsWithDNSNames" true "MPSSupport" false "PassthroughSupport" false "TimeSlicingSettings" false -}}
{{- range $name, $on := (include "cdd.explicitGates" . | fromJson) -}}
{{- $_ := set $g $name $on -}}
{{- end -}}
{{- if and (include "cdd.computeDomains" .) (include "cdd.hostManaged" .) -}}
{{- $_ := set $g "IMEXDaemonsWithDNSNames" false -}}
{{- $_ := set $g "ComputeDomainCliques" false -}}
{{- end -}}
{{- toJson $g -}}
{{- end -}}

{{/* FEATURE_GATES for the apps: only the gates the user set, sorted, "A=true,B=false". */}}
{{- define "cdd.featureGatesEnv" -}}
{{- $pairs := list -}}
{{- range $name, $on := (include "cdd.explicitGates" . | fromJson) -}}
{{- $pairs = append $pairs (printf "%s=%t" $name $on) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
Fail rendering on any invalid mode / isolation / gate combination, in the order
core.computedomain.modes.resolve_driver_config checks: gates, mode, HostManagedIMEX gate, gate
dependencies (after the hostManaged overrides), isolation. The IMEX checks apply only while the
ComputeDomain half is on. Every message is the apps' ConfigError text.
*/}}
{{- define "cdd.validate" -}}
{{- $known := list "ComputeDomainCliques" "CrashOnNVLinkFabricErrors" "HostManagedIMEX" "HostManagedIMEXDaemon" "IMEXDaemonsWithDNSNames" "MPSSupport" "PassthroughSupport" "TimeSlicingSettings" -}}
{{- range $name, $_ := (.Values.featureGates | default dict) -}}
{{- if not (has $name $known) -}}
{{- fail (printf "unknown feature gate '%s': known gates are ComputeDomainCliques, CrashOnNVLinkFabricErrors, HostManagedIMEX, IMEXDaemonsWithDNSNames, MPSSupport, PassthroughSupport, TimeSlicingSettings" $name) -}}
{{- end -}}
{{- end -}}
{{- if not (or (include "cdd.computeDomains" .) (include "cdd.gpus" .)) -}}
{{- fail "resources.computeDomains.enabled=false and resources.gpus.enabled=false leave nothing to install: enable the ComputeDomain half, the GPU half (resources.gpus.enabled=true), or both" -}}
{{- end -}}
{{- if include "cdd.computeDomains" . -}}
{{- include "cdd.validateIMEX" . -}}
{{- else -}}
{{- /* The GPU half alone: the IMEX checks do not apply, the gates' dependencies still do. */ -}}
{{- $g := include "cdd.effectiveGates" . | fromJson -}}
{{- if and $g.ComputeDomainCliques (not $g.IMEXDaemonsWithDNSNames) -}}
{{- fail "feature gate ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true" -}}
{{- end -}}
{{- end -}}
{{- if include "cdd.gpus" . -}}
{{- include "cdd.validateGPUs" . -}}
{{- end -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.tls.secretName) -}}
{{- fail "webhook.enabled=true needs webhook.tls.secretName: the name of a kubernetes.io/tls Secret holding the webhook's serving certificate" -}}
{{- end -}}
{{- end -}}

{{/* The ComputeDomain half's mode, isolation and gate dependencies (skipped when it is off). */}}
{{- define "cdd.validateIMEX" -}}
{{- $mode := include "cdd.mode" . -}}
{{- if not (has $mode (list "driverManaged" "hostManaged")) -}}
{{- fail (printf "unknown IMEX mode '%s': use driverManaged or hostManaged" $mode) -}}
{{- end -}}
{{- $explicit := include "cdd.explicitGates" . | fromJson -}}
{{- if and (eq $mode "hostManaged") (not $explicit.HostManagedIMEX) -}}
{{- fail "IMEX mode hostManaged requires feature gate HostManagedIMEX=true: set featureGates.HostManagedIMEX=true (Helm) or FEATURE_GATES=HostManagedIMEX=true, or use mode driverManaged" -}}
{{- end -}}
{{- $g := include "cdd.effectiveGates" . | fromJson -}}
{{- if and $g.ComputeDomainCliques (not $g.IMEXDaemonsWithDNSNames) -}}
{{- fail "feature gate ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true" -}}
{{- end -}}
{{- $iso := .Values.resources.computeDomains.imex.isolation | default "" -}}
{{- if not (has $iso (list "" "domain" "channel" "none")) -}}
{{- fail (printf "unknown IMEX isolation '%s': use domain, channel or none" $iso) -}}
{{- end -}}
{{- if eq $mode "driverManaged" -}}
{{- if has $iso (list "none" "channel") -}}
{{- fail (printf "isolation '%s' is only valid with mode hostManaged: with mode driverManaged leave isolation empty or set it to 'domain'" $iso) -}}
{{- end -}}
{{- else -}}
{{- if eq $iso "domain" -}}
{{- fail "isolation 'domain' needs driver-managed IMEX daemons (one IMEX domain per ComputeDomain) and is invalid with mode hostManaged: set isolation to 'none' (all ComputeDomains share host channel 0) or 'channel' (one channel per ComputeDomain)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The GPU container shares the pod's network namespace with the ComputeDomain container, so the
two must not listen on the same port.
*/}}
{{- define "cdd.validateGPUs" -}}
{{- if include "cdd.computeDomains" . -}}
{{- $gpuHealth := include "cdd.gpuPluginHealthPort" . -}}
{{- if eq $gpuHealth (include "cdd.pluginHealthPort" .) -}}
{{- fail (printf "the GPU plugin's health port %s is the ComputeDomain plugin's too (both containers share the pod's network): set kubeletPlugin.gpus.healthPort to another port" $gpuHealth) -}}
{{- end -}}
{{- if eq (toString .Values.kubeletPlugin.gpus.metricsPort) (toString .Values.kubeletPlugin.metricsPort) -}}
{{- fail (printf "the GPU plugin's metrics port %v is the ComputeDomain plugin's too (both containers share the pod's network): set kubeletPlugin.gpus.metricsPort to another port" .Values.kubeletPlugin.gpus.metricsPort) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Kubelet plugin paths and health port. Our keys win; when left empty, the upstream chart's keys
(kubeletPluginsDirectoryPath: the kubelet's plugins directory, this driver's directory below it;
kubeletRegistrarDirectoryPath; containers.computeDomains.healthcheckPort) are honoured, then the
kubelet's defaults.
*/}}
{{- define "cdd.pluginDir" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- if $kp.pluginDir -}}{{ $kp.pluginDir }}
{{- else if $kp.kubeletPluginsDirectoryPath -}}{{ printf "%s/compute-domain.nvidia.com" ($kp.kubeletPluginsDirectoryPath | trimSuffix "/") }}
{{- else -}}/var/lib/kubelet/plugins/compute-domain.nvidia.com{{- end -}}
{{- end -}}

{{- define "cdd.registryDir" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- $kp.registryDir | default $kp.kubeletRegistrarDirectoryPath | default "/var/lib/kubelet/plugins_registry" -}}
{{- end -}}

{{- define "cdd.pluginHealthPort" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- $upstream := dig "containers" "computeDomains" "healthcheckPort" nil $kp -}}
{{- $kp.healthPort | default $upstream | default 51515 | int -}}
{{- end -}}

{{/*
"true" when the ComputeDomain plugin sets the nvidia.com/gpu.clique node label (upstream key
kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled, off by default as upstream).
*/}}
{{- define "cdd.gpuCliqueLabel" -}}
{{- if dig "containers" "computeDomains" "gpuCliqueLabelEnabled" false .Values.kubeletPlugin -}}true{{- end -}}
{{- end -}}

{{/*
The GPU plugin's directory (its DRA socket and checkpoint): kubeletPlugin.gpus.pluginDir, else
gpu.nvidia.com below upstream's kubeletPluginsDirectoryPath, else below the kubelet's default.
*/}}
{{- define "cdd.gpuPluginDir" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- if $kp.gpus.pluginDir -}}{{ $kp.gpus.pluginDir }}
{{- else if $kp.kubeletPluginsDirectoryPath -}}{{ printf "%s/gpu.nvidia.com" ($kp.kubeletPluginsDirectoryPath | trimSuffix "/") }}
{{- else -}}/var/lib/kubelet/plugins/gpu.nvidia.com{{- end -}}
{{- end -}}

{{/* The GPU plugin's gRPC health port: ours, else upstream's containers.gpus.healthcheckPort, else 51516 (upstream's). */}}
{{- define "cdd.gpuPluginHealthPort" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- $upstream := dig "containers" "gpus" "healthcheckPort" nil $kp -}}
{{- $kp.gpus.healthPort | default $upstream | default 51516 | int -}}
{{- end -}}

{{/* Env shared by the controller and the kubelet plugin. */}}
{{- define "cdd.commonEnv" -}}
- name: NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: FEATURE_GATES
  value: {{ include "cdd.featureGatesEnv" . | quote }}
- name: IMEX_MODE
  value: {{ include "cdd.mode" . | quote }}
- name: IMEX_ISOLATION
  value: {{ include "cdd.isolation" . | quote }}
- name: IMEX_CHANNELS_MAX
  value: {{ include "cdd.channelsMax" . | quote }}
- name: IMEX_CHANNEL_SLOTS
  value: {{ include "cdd.channelSlots" . | quote }}
- name: LOG_VERBOSITY
  value: {{ .Values.logVerbosity | toString | quote }}
{{- end -}}

{{- /* Seconds from a Go-style duration ("15s", "500ms", "1m") or a number of seconds. */ -}}
{{- define "cdd.durationSeconds" -}}
{{- $v := toString . -}}
{{- if hasSuffix "ms" $v -}}{{ divf (trimSuffix "ms" $v | float64) 1000 }}
{{- else if hasSuffix "s" $v -}}{{ trimSuffix "s" $v }}
{{- else if hasSuffix "m" $v -}}{{ mulf (trimSuffix "m" $v | float64) 60 }}
{{- else -}}{{ $v }}
{{- end -}}
{{- end -}}
