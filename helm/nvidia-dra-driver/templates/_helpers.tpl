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

{{/* Upstream's namespaceOverride, else the release namespace. */}}
{{- define "cdd.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
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
This driver's own image repository: the default of values.yaml `image.repository` (a test keeps
the two equal), and what an upstream driver image is replaced by.
*/}}
{{- define "cdd.ownImageRepository" -}}computedomain-driver{{- end -}}

{{/*
Repositories of the upstream Go driver's image. An upstream values file names one; that image
cannot run this chart's commands, so the chart runs its own image (repository and appVersion tag)
instead and NOTES.txt says so (docs/operations.md, "Migrating from the upstream driver").
*/}}
{{- define "cdd.upstreamImageRepositories" -}}
{{- list "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu" "nvcr.io/nvidia/k8s-dra-driver-gpu" "ghcr.io/nvidia/k8s-dra-driver-gpu" "nvcr.io/nvidia/k8s-dra-driver" | toJson -}}
{{- end -}}

{{/* "true" when `.` (a repository) is the upstream driver's image. */}}
{{- define "cdd.isUpstreamImage" -}}
{{- if has (. | trimSuffix "/") (include "cdd.upstreamImageRepositories" . | fromJsonArray) -}}true{{- end -}}
{{- end -}}

{{/*
Image of a component: call with (dict "root" $ "image" .Values.<component>.image).
Empty fields fall back to the global `image`, the tag finally to the chart's appVersion; an
upstream driver image becomes this chart's own (see cdd.upstreamImageRepositories).
*/}}
{{- define "cdd.image" -}}
{{- $root := .root -}}
{{- $img := .image | default dict -}}
{{- $repo := $img.repository | default $root.Values.image.repository -}}
{{- $tag := $img.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- if include "cdd.isUpstreamImage" $repo -}}
{{- $repo = include "cdd.ownImageRepository" $root -}}
{{- $tag = $root.Chart.AppVersion -}}
{{- end -}}
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

{{/*
"true" when the GPU half (gpu.nvidia.com) is installed, else empty. resources.gpus.enabled
decides when set; left empty, upstream's gpuResourcesEnabledOverride=true turns the half on, as
upstream's own default (enabled, unlocked by that override) does. Off otherwise.
*/}}
{{- define "cdd.gpus" -}}
{{- $enabled := (.Values.resources.gpus | default dict).enabled -}}
{{- if kindIs "bool" $enabled -}}{{- if $enabled -}}true{{- end -}}
{{- else if .Values.gpuResourcesEnabledOverride -}}true{{- end -}}
{{- end -}}

{{/* "true" when gate PassthroughSupport is on (VFIO devices, their DeviceClass, /sys read-write). */}}
{{- define "cdd.mps" -}}
{{- if (include "cdd.effectiveGates" . | fromJson).MPSSupport -}}true{{- end -}}
{{- end -}}

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

{{/* The isolation the apps run with: empty means domain in both modes, as upstream (under
hostManaged: every ComputeDomain on host channel 0; "none" is our older name for that). */}}
{{- define "cdd.isolation" -}}
{{- .Values.resources.computeDomains.imex.isolation | default "domain" -}}
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
Gates the user set, as JSON {name: bool}, AllAlpha / AllBeta included. A gate is on only when
its value prints as "true", so `--set-string featureGates.X=false` (the string "false") stays
off. Our older name HostManagedIMEX becomes HostManagedIMEXDaemon; when both are set,
HostManagedIMEXDaemon wins.
*/}}
{{- define "cdd.explicitGates" -}}
{{- $gates := .Values.featureGates | default dict -}}
{{- $out := dict -}}
{{- range $name, $value := $gates -}}
{{- $on := eq (toString $value) "true" -}}
{{- if eq $name "HostManagedIMEX" -}}
{{- if not (hasKey $gates "HostManagedIMEXDaemon") -}}{{- $_ := set $out "HostManagedIMEXDaemon" $on -}}{{- end -}}
{{- else -}}
{{- $_ := set $out $name $on -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
Every known gate with upstream's default, as JSON: core/gates.py REGISTRY (upstream's thirteen,
the seed's FabricTopologySupport, the Kubernetes logging gates upstream's binaries accept, and
our ComputeDomainBindingConditions).
*/}}
{{- define "cdd.gateDefaults" -}}
{{- dict "ComputeDomainBindingConditions" false "ComputeDomainCliques" true "ConsumableShares" false "ContextualLogging" true "CrashOnNVLinkFabricErrors" true "DRAListTypeAttributes" false "DeviceMetadata" false "DynamicMIG" false "FabricManagerPartitioning" false "FabricTopologySupport" false "HostManagedIMEXDaemon" false "IMEXDaemonsWithDNSNames" true "LoggingAlphaOptions" false "LoggingBetaOptions" true "MPSSupport" false "NVMLDeviceHealthCheck" false "PassthroughSupport" false "TimeSlicingSettings" false | toJson -}}
{{- end -}}

{{/*
The gates AllAlpha / AllBeta set (core/gates.py REGISTRY stages), as JSON {toggle: [gates]}.
ContextualLogging is beta but left out: upstream sets it explicitly before the user's gates.
*/}}
{{- define "cdd.gateToggles" -}}
{{- dict "AllAlpha" (list "ComputeDomainBindingConditions" "ConsumableShares" "DRAListTypeAttributes" "DeviceMetadata" "DynamicMIG" "FabricManagerPartitioning" "FabricTopologySupport" "HostManagedIMEXDaemon" "LoggingAlphaOptions" "MPSSupport" "NVMLDeviceHealthCheck" "PassthroughSupport" "TimeSlicingSettings") "AllBeta" (list "ComputeDomainCliques" "CrashOnNVLinkFabricErrors" "IMEXDaemonsWithDNSNames" "LoggingBetaOptions") | toJson -}}
{{- end -}}

{{/*
Every known gate with its effective value: upstream defaults, then AllAlpha / AllBeta on the
gates of their stage, then the gates the user set (explicit settings win), then the
hostManaged overrides.
*/}}
{{- define "cdd.effectiveGates" -}}
{{- $g := include "cdd.gateDefaults" . | fromJson -}}
{{- $explicit := include "cdd.explicitGates" . | fromJson -}}
{{- range $toggle, $names := (include "cdd.gateToggles" . | fromJson) -}}
{{- if hasKey $explicit $toggle -}}
{{- range $name := $names -}}{{- $_ := set $g $name (get $explicit $toggle) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $on := $explicit -}}
{{- if hasKey $g $name -}}{{- $_ := set $g $name $on -}}{{- end -}}
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
core.computedomain.modes.resolve_driver_config checks: gates, mode, HostManagedIMEXDaemon gate, gate
dependencies (after the hostManaged overrides), isolation. The IMEX checks apply only while the
ComputeDomain half is on. Every message is the apps' ConfigError text.
*/}}
{{- define "cdd.validate" -}}
{{- $known := keys (include "cdd.gateDefaults" . | fromJson) | sortAlpha -}}
{{- range $name, $_ := (.Values.featureGates | default dict) -}}
{{- if not (has $name (concat $known (list "AllAlpha" "AllBeta" "HostManagedIMEX"))) -}}
{{- fail (printf "unknown feature gate '%s': known gates are %s (and AllAlpha, AllBeta; HostManagedIMEX is an alias of HostManagedIMEXDaemon)" $name (join ", " $known)) -}}
{{- end -}}
{{- end -}}
{{- if not (or (include "cdd.computeDomains" .) (include "cdd.gpus" .)) -}}
{{- fail "resources.computeDomains.enabled=false and resources.gpus.enabled=false leave nothing to install: enable the ComputeDomain half, the GPU half (resources.gpus.enabled=true), or both" -}}
{{- end -}}
{{- if include "cdd.computeDomains" . -}}
{{- include "cdd.validateIMEX" . -}}
{{- else -}}
{{- /* The GPU half alone: the IMEX checks do not apply, the gates' dependencies still do. */ -}}
{{- include "cdd.validateGateRules" . -}}
{{- end -}}
{{- if include "cdd.gpus" . -}}
{{- include "cdd.validateGPUs" . -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- include "cdd.validateWebhookTLS" . -}}
{{- end -}}
{{- include "cdd.validateUpstreamKeys" . -}}
{{- end -}}

{{/*
The webhook's serving certificate (webhook.tls), upstream's two modes:
  cert-manager: the chart creates a Certificate (and, issuerType selfsigned, its Issuer);
                cert-manager writes the Secret and injects the CA into the webhook configuration.
  secret:       a given kubernetes.io/tls Secret (tls.secret.name), CA in tls.secret.caBundle.
An empty mode keeps this chart's older keys working: secretName set means "secret", else
cert-manager (upstream's default). secretName/caBundle are read where secret.name/caBundle are
empty; certManagerCertificate names a Certificate made outside the chart (secret mode).
*/}}
{{- define "cdd.webhookTLSMode" -}}
{{- $tls := .Values.webhook.tls -}}
{{- if $tls.mode -}}{{ $tls.mode }}{{- else if $tls.secretName -}}secret{{- else -}}cert-manager{{- end -}}
{{- end -}}

{{- define "cdd.webhookCertName" -}}{{ include "cdd.webhookName" . }}-cert{{- end -}}
{{- define "cdd.webhookIssuerName" -}}{{ include "cdd.webhookName" . }}-issuer{{- end -}}

{{/* The Secret the webhook's certificate and key are read from. */}}
{{- define "cdd.webhookTLSSecretName" -}}
{{- $tls := .Values.webhook.tls -}}
{{- if eq (include "cdd.webhookTLSMode" .) "secret" -}}
{{ (($tls.secret | default dict).name) | default $tls.secretName }}
{{- else -}}
{{ include "cdd.webhookCertName" . }}
{{- end -}}
{{- end -}}

{{/* The caBundle of the webhook configuration (secret mode only; cert-manager injects it). */}}
{{- define "cdd.webhookCABundle" -}}
{{- $tls := .Values.webhook.tls -}}
{{- if eq (include "cdd.webhookTLSMode" .) "secret" -}}
{{ (($tls.secret | default dict).caBundle) | default $tls.caBundle }}
{{- end -}}
{{- end -}}

{{/* "<namespace>/<Certificate>" whose CA cert-manager's cainjector puts into the configuration. */}}
{{- define "cdd.webhookInjectCAFrom" -}}
{{- if eq (include "cdd.webhookTLSMode" .) "cert-manager" -}}
{{ include "cdd.namespace" . }}/{{ include "cdd.webhookCertName" . }}
{{- else -}}
{{ .Values.webhook.tls.certManagerCertificate }}
{{- end -}}
{{- end -}}

{{- define "cdd.validateWebhookTLS" -}}
{{- $tls := .Values.webhook.tls -}}
{{- $mode := include "cdd.webhookTLSMode" . -}}
{{- if not (has $mode (list "cert-manager" "secret")) -}}
{{- fail (printf "webhook.tls.mode '%s' is unknown: use cert-manager (the chart asks cert-manager for the certificate) or secret (give webhook.tls.secret.name)" $mode) -}}
{{- end -}}
{{- if and (eq $mode "secret") (not (include "cdd.webhookTLSSecretName" .)) -}}
{{- fail "webhook.tls.mode=secret needs webhook.tls.secret.name: the name of a kubernetes.io/tls Secret (tls.crt, tls.key) holding the webhook's serving certificate, and webhook.tls.secret.caBundle: the base64 PEM of the CA that signed it" -}}
{{- end -}}
{{- if eq $mode "cert-manager" -}}
{{- $cm := $tls.certManager | default dict -}}
{{- $issuerType := $cm.issuerType | default "selfsigned" -}}
{{- if not (has $issuerType (list "selfsigned" "issuer" "clusterissuer")) -}}
{{- fail (printf "webhook.tls.certManager.issuerType '%s' is unknown: use selfsigned (the chart creates an Issuer), issuer or clusterissuer (name yours in webhook.tls.certManager.issuerName)" $issuerType) -}}
{{- end -}}
{{- if and (ne $issuerType "selfsigned") (not $cm.issuerName) -}}
{{- fail (printf "webhook.tls.certManager.issuerType=%s needs webhook.tls.certManager.issuerName: the cert-manager %s that signs the webhook's certificate" $issuerType (ternary "ClusterIssuer" "Issuer (in the release namespace)" (eq $issuerType "clusterissuer"))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ComputeDomain half's mode, isolation and gate dependencies (skipped when it is off). */}}
{{- define "cdd.validateIMEX" -}}
{{- $mode := include "cdd.mode" . -}}
{{- if not (has $mode (list "driverManaged" "hostManaged")) -}}
{{- fail (printf "unknown IMEX mode '%s': use driverManaged or hostManaged" $mode) -}}
{{- end -}}
{{- $effective := include "cdd.effectiveGates" . | fromJson -}}
{{- if and (eq $mode "hostManaged") (not $effective.HostManagedIMEXDaemon) -}}
{{- fail "IMEX mode hostManaged requires feature gate HostManagedIMEXDaemon=true: set featureGates.HostManagedIMEXDaemon=true (Helm) or FEATURE_GATES=HostManagedIMEXDaemon=true, or use mode driverManaged" -}}
{{- end -}}
{{- include "cdd.validateGateRules" . -}}
{{- $iso := .Values.resources.computeDomains.imex.isolation | default "" -}}
{{- if not (has $iso (list "" "domain" "channel" "none")) -}}
{{- fail (printf "unknown IMEX isolation '%s': use domain or channel (none is accepted as an old name of domain under hostManaged)" $iso) -}}
{{- end -}}
{{- if and (eq $mode "driverManaged") (has $iso (list "none" "channel")) -}}
{{- fail (printf "isolation '%s' is only valid with mode hostManaged: with mode driverManaged leave isolation empty or set it to 'domain'" $iso) -}}
{{- end -}}
{{- end -}}

{{/*
Upstream's gate dependency rules, in its order (core/gates.py RULES), on the effective gates
(after the hostManaged overrides). Gates whose feature a binary lacks are accepted here: that
binary refuses to start with the gate on, naming it.
*/}}
{{- define "cdd.validateGateRules" -}}
{{- $g := include "cdd.effectiveGates" . | fromJson -}}
{{- if and $g.ComputeDomainCliques (not $g.IMEXDaemonsWithDNSNames) -}}
{{- fail "feature gate ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true" -}}
{{- end -}}
{{- range $pair := list (list "DynamicMIG" "PassthroughSupport") (list "DynamicMIG" "NVMLDeviceHealthCheck") (list "DynamicMIG" "MPSSupport") (list "PassthroughSupport" "NVMLDeviceHealthCheck") -}}
{{- if and (get $g (index $pair 0)) (get $g (index $pair 1)) -}}
{{- fail (printf "feature gate %s=true cannot be combined with %s=true (the two are mutually exclusive, as upstream): set one of them to false" (index $pair 0) (index $pair 1)) -}}
{{- end -}}
{{- end -}}
{{- if and $g.DeviceMetadata (not $g.PassthroughSupport) -}}
{{- fail "feature gate DeviceMetadata=true requires PassthroughSupport=true" -}}
{{- end -}}
{{- if and $g.FabricTopologySupport (not $g.FabricManagerPartitioning) -}}
{{- fail "feature gate FabricTopologySupport=true requires FabricManagerPartitioning=true" -}}
{{- end -}}
{{- end -}}

{{/*
The GPU container shares the pod's network namespace with the ComputeDomain container, so the
two must not listen on the same port.
*/}}
{{- define "cdd.validateGPUs" -}}
{{- $shares := include "cdd.consumableShares" . -}}
{{- if and $shares (ne $shares "disabled") (not (index (include "cdd.effectiveGates" . | fromJson) "ConsumableShares")) -}}
{{- fail (printf "--consumable-shares=%s (CONSUMABLE_SHARES, Helm consumableShares) requires feature gate ConsumableShares=true; enable it (featureGates.ConsumableShares=true) or set --consumable-shares=disabled" $shares) -}}
{{- end -}}
{{- if include "cdd.computeDomains" . -}}
{{- $gpuHealth := include "cdd.gpuPluginHealthPort" . -}}
{{- if and (ne $gpuHealth "0") (eq $gpuHealth (include "cdd.pluginHealthPort" .)) -}}
{{- fail (printf "the GPU plugin's health port %s is the ComputeDomain plugin's too (both containers share the pod's network): set kubeletPlugin.gpus.healthPort to another port" $gpuHealth) -}}
{{- end -}}
{{- $gpuMetrics := include "cdd.gpuPluginMetricsPort" . -}}
{{- if and (ne $gpuMetrics "0") (eq $gpuMetrics (include "cdd.pluginMetricsPort" .)) -}}
{{- fail (printf "the GPU plugin's metrics port %s is the ComputeDomain plugin's too (both containers share the pod's network): set kubeletPlugin.gpus.metricsPort to another port" $gpuMetrics) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Upstream's consumableShares as the GPU plugin's CONSUMABLE_SHARES ("" when unset). */}}
{{- define "cdd.consumableShares" -}}
{{- if not (kindIs "invalid" .Values.consumableShares) -}}{{ .Values.consumableShares | toString }}{{- end -}}
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

{{- /* 0 (upstream's healthcheckPort zero or negative): no health service, no probes. */ -}}
{{- define "cdd.pluginHealthPort" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- $upstream := dig "containers" "computeDomains" "healthcheckPort" nil $kp -}}
{{- $kp.healthPort | default $upstream | default 51515 | int | max 0 -}}
{{- end -}}

{{/*
"true" when the ComputeDomain plugin sets the nvidia.com/gpu.clique node label (upstream key
kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled, off by default as upstream).
*/}}
{{/*
"true" when the plugin pods update without a gap (docs/operations.md, "Upgrading the plugins"):
kubeletPlugin.seamlessUpgrade, or when null, whether the cluster is 1.33+ (the kubelet
registers a second plugin pod of a driver beside the first from 1.33 on).
*/}}
{{- define "cdd.seamlessUpgrade" -}}
{{- $set := .Values.kubeletPlugin.seamlessUpgrade -}}
{{- if kindIs "bool" $set -}}{{- if $set -}}true{{- end -}}
{{- else if semverCompare ">=1.33.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end -}}

{{/*
The DaemonSet's updateStrategy: kubeletPlugin.updateStrategy when set; else, updating without a
gap, one new pod beside the old on each node (maxSurge 1, maxUnavailable 0); else RollingUpdate.
*/}}
{{- define "cdd.pluginUpdateStrategy" -}}
{{- if .Values.kubeletPlugin.updateStrategy -}}
{{- toYaml .Values.kubeletPlugin.updateStrategy -}}
{{- else if include "cdd.seamlessUpgrade" . -}}
{{- toYaml (dict "type" "RollingUpdate" "rollingUpdate" (dict "maxSurge" 1 "maxUnavailable" 0)) -}}
{{- else -}}
{{- toYaml (dict "type" "RollingUpdate") -}}
{{- end -}}
{{- end -}}

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
{{- $kp.gpus.healthPort | default $upstream | default 51516 | int | max 0 -}}
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

{{/* ------------------------------------------------------------ upstream's keys */}}

{{/*
The port of an upstream "[host]:port" endpoint (":8080" -> 8080); empty for an empty endpoint.
This chart listens on all interfaces, so the host part is not used.
*/}}
{{- define "cdd.endpointPort" -}}
{{- if . -}}{{ regexFind "[0-9]+$" (toString .) | int }}{{- end -}}
{{- end -}}

{{/*
Metrics ports: 0 when upstream's metrics.enabled is false (no endpoint), else our *metricsPort
when set, else the port of upstream's *HttpEndpoint, else our default. Our keys default to null
so that an upstream values file's endpoints are honoured.
*/}}
{{- define "cdd.controllerMetricsPort" -}}
{{- $c := .Values.controller -}}
{{- if not (dig "metrics" "enabled" true $c) -}}0
{{- else -}}{{ $c.metricsPort | default (include "cdd.endpointPort" (dig "metrics" "httpEndpoint" "" $c)) | default 8080 | int }}
{{- end -}}
{{- end -}}

{{- define "cdd.pluginMetricsPort" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- if not (dig "metrics" "enabled" true $kp) -}}0
{{- else -}}{{ $kp.metricsPort | default (include "cdd.endpointPort" (dig "metrics" "computeDomainHttpEndpoint" "" $kp)) | default 8082 | int }}
{{- end -}}
{{- end -}}

{{- define "cdd.gpuPluginMetricsPort" -}}
{{- $kp := .Values.kubeletPlugin -}}
{{- if not (dig "metrics" "enabled" true $kp) -}}0
{{- else -}}{{ $kp.gpus.metricsPort | default (include "cdd.endpointPort" (dig "metrics" "gpuHttpEndpoint" "" $kp)) | default 8083 | int }}
{{- end -}}
{{- end -}}

{{/*
A container's securityContext: the chart's own (call with dict "ours" <YAML text> "user" <map>),
with the user's upstream-style containers.<name>.securityContext merged over it.
*/}}
{{- define "cdd.mergedSecurityContext" -}}
{{- $ours := fromYaml .ours -}}
{{- toYaml (mergeOverwrite $ours (deepCopy (.user | default dict))) -}}
{{- end -}}

{{/* apiVersion of the DeviceClasses: upstream's resourceApiVersion, else resource.k8s.io/v1. */}}
{{- define "cdd.resourceApiVersion" -}}
{{- .Values.resourceApiVersion | default "resource.k8s.io/v1" -}}
{{- end -}}

{{/* Upstream keys this chart accepts but whose feature it does not have: refused when they ask for it. */}}
{{- define "cdd.validateUpstreamKeys" -}}
{{- if .Values.maskNvidiaDriverParams -}}
{{- fail "maskNvidiaDriverParams=true: this chart cannot hide ModifyDeviceFiles from NVML yet; leave it false (or unset)" -}}
{{- end -}}
{{- range $component := list "controller" "kubeletPlugin" -}}
{{- if dig "networkPolicy" "enabled" false (index $.Values $component) -}}
{{- fail (printf "%s.networkPolicy.enabled=true: this chart creates no NetworkPolicy yet; set it to false and add your own NetworkPolicy" $component) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The container runtime's CRI socket for the plugins' CDI check (docs/operations.md, "Container
runtime CDI check"). kubeletPlugin.containerRuntimeEndpoint: empty = the usual sockets (the
directories of containerd's and CRI-O's are mounted), "none" = no check, else that socket.
Mounted read-only at the path the host uses, so the plugin asks the endpoint it was given.
*/}}
{{- define "cdd.runtimeSocketPath" -}}
{{- .Values.kubeletPlugin.containerRuntimeEndpoint | default "" | trimPrefix "unix://" -}}
{{- end -}}

{{- define "cdd.runtimeSocketMounts" -}}
{{- $socket := include "cdd.runtimeSocketPath" . -}}
{{- if eq $socket "" }}
- name: containerd-socket-dir
  mountPath: /run/containerd
  readOnly: true
- name: crio-socket-dir
  mountPath: /var/run/crio
  readOnly: true
{{- else if ne $socket "none" }}
- name: container-runtime-socket
  mountPath: {{ $socket }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "cdd.runtimeSocketVolumes" -}}
{{- $socket := include "cdd.runtimeSocketPath" . -}}
{{- if eq $socket "" }}
# NB: DirectoryOrCreate: a node runs one of the two runtimes; the other's (empty) directory is
# created under /run, a tmpfs, rather than keeping the plugin pod from starting.
- name: containerd-socket-dir
  hostPath:
    path: /run/containerd
    type: DirectoryOrCreate
- name: crio-socket-dir
  hostPath:
    path: /var/run/crio
    type: DirectoryOrCreate
{{- else if ne $socket "none" }}
- name: container-runtime-socket
  hostPath:
    path: {{ $socket }}
    type: Socket
{{- end }}
{{- end -}}
