# Identities and grants: one service account per function, each with only what it uses; a
# push invoker for the Pub/Sub push paths; an Eventarc trigger identity for uploads; a build
# identity for Cloud Build. No basic roles, no allUsers or allAuthenticatedUsers, no keys.

# --- What the functions call in Vertex AI -----------------------------------------------------

# Exactly the Vertex AI methods the adapters call (shared/adapters/vertex/jobs.py, endpoints.py),
# instead of roles/aiplatform.user. GetOperation on a DeployModel operation
# (endpoints/E/operations/O) is authorised by aiplatform.endpoints.get; there is no
# aiplatform.operations.get permission to grant. ListOperations of an endpoint's operations
# (endpoints/E/operations, to know whether a DeployModel whose answer was lost still runs)
# is on the same parent; were it refused, the tick logs it and the DeployModel is waited
# for, never given up (shared/domain/serving/rule.py, may_still_land): it fails safe.
resource "google_project_iam_custom_role" "vertex_jobs" {
  role_id     = "flexjobsVertexJobs"
  title       = "flexjobs Vertex AI jobs"
  description = "Create, read, list and cancel custom jobs, tuning jobs and training pipelines; deploy, hedge and undeploy models on existing endpoints. Used by the flexjobs functions."
  permissions = [
    # JobService: CreateCustomJob, GetCustomJob, ListCustomJobs (label lookups), CancelCustomJob
    "aiplatform.customJobs.cancel",
    "aiplatform.customJobs.create",
    "aiplatform.customJobs.get",
    "aiplatform.customJobs.list",
    # JobService: the same for hyperparameter tuning jobs
    "aiplatform.hyperparameterTuningJobs.cancel",
    "aiplatform.hyperparameterTuningJobs.create",
    "aiplatform.hyperparameterTuningJobs.get",
    "aiplatform.hyperparameterTuningJobs.list",
    # PipelineService: the same for training pipelines
    "aiplatform.trainingPipelines.cancel",
    "aiplatform.trainingPipelines.create",
    "aiplatform.trainingPipelines.get",
    "aiplatform.trainingPipelines.list",
    # EndpointService: GetEndpoint (adopt a deployment by its tag, follow its serving;
    # GetOperation on its operations), DeployModel (the deployment and its on-demand
    # fallback) and MutateDeployedModel (growing the fallback: the REST reference of
    # endpoints.mutateDeployedModel names aiplatform.endpoints.deploy), UpdateEndpoint (the
    # traffic split only, sent with the read's etag), UndeployModel (the fallback once Spot
    # serves again, and an undeployed deployment); reading the model being deployed
    "aiplatform.endpoints.deploy",
    "aiplatform.endpoints.get",
    "aiplatform.endpoints.undeploy",
    "aiplatform.endpoints.update",
    "aiplatform.models.get",
  ]

  depends_on = [google_project_service.apis]
}

# --- One service account per function ---------------------------------------------------------

resource "google_service_account" "function" {
  for_each = local.functions

  account_id   = each.value.account_id
  display_name = "flexjobs ${each.key}"
  description  = "Runs the ${each.key} function of flexjobs."

  depends_on = [google_project_service.apis]
}

locals {
  # Project-level roles of every function: all four create or read Vertex jobs (requests and
  # uploads submit; events and the tick retry, reconcile and cancel) and keep the records in
  # Firestore. roles/datastore.user is the narrowest predefined Firestore read/write role.
  function_project_roles = merge([
    for name in keys(local.functions) : {
      "${name} vertex"    = { function = name, role = google_project_iam_custom_role.vertex_jobs.name }
      "${name} firestore" = { function = name, role = "roles/datastore.user" }
    }
  ]...)

  # Checkpoints are read in the checkpoint buckets only, never in the request bucket (its
  # objects are never checkpoints: storage.tf). The retries list the latest checkpoint
  # (shared/adapters/gcs.py, GcsCheckpointStore): the event handler and the tick, in every
  # bucket jobs write to; a bucket not listed makes a retry fail with 403 (it never restarts
  # from scratch in its place). handle_upload lists the step directory a checkpoint event
  # names before it records anything: in the buckets that notify.
  checkpoint_readers = merge(
    {
      for pair in setproduct(["handle_job_event", "handle_scheduler_tick"], var.checkpoint_buckets) :
      "${pair[0]} ${pair[1]}" => { function = pair[0], bucket = pair[1] }
    },
    {
      for bucket in local.checkpoint_notify_buckets :
      "handle_upload ${bucket}" => { function = "handle_upload", bucket = bucket }
    },
  )

  # Every function may create jobs (intake, or a retry), so each may act as the service
  # accounts a request may name, and as no other.
  training_sa_users = {
    for pair in setproduct(keys(local.functions), var.training_service_accounts) :
    "${pair[0]} ${pair[1]}" => {
      function = pair[0]
      # projects/PROJECT/serviceAccounts/EMAIL, PROJECT read from the email where it says.
      service_account_id = format(
        "projects/%s/serviceAccounts/%s",
        try(regex("@([a-z][-a-z0-9]*)\\.iam\\.gserviceaccount\\.com$", pair[1])[0], var.project_id),
        pair[1],
      )
    }
  }
}

resource "google_project_iam_member" "function_roles" {
  for_each = local.function_project_roles

  project = var.project_id
  role    = each.value.role
  member  = google_service_account.function[each.value.function].member
}

# The tick reads the project's GPU quota limits (admission's ceiling, docs/admission.md) with
# Cloud Quotas ListQuotaInfos: roles/cloudquotas.viewer reads quota information and changes
# nothing (no quota preference). Only the tick reads them; the other functions use the limits
# it caches in the ledger.
resource "google_project_iam_member" "tick_quota_viewer" {
  project = var.project_id
  role    = "roles/cloudquotas.viewer"
  member  = google_service_account.function["handle_scheduler_tick"].member
}

# Every function publishes notifications (shared/adapters/pubsub.py); none publishes elsewhere.
resource "google_pubsub_topic_iam_member" "function_publisher" {
  for_each = local.functions

  topic  = google_pubsub_topic.notifications.id
  role   = "roles/pubsub.publisher"
  member = google_service_account.function[each.key].member
}

resource "google_storage_bucket_iam_member" "checkpoint_reader" {
  for_each = local.checkpoint_readers

  bucket = each.value.bucket
  role   = "roles/storage.objectViewer"
  member = google_service_account.function[each.value.function].member
}

# handle_upload reads the request files (one ranged read at the event's generation): the only
# read of the request bucket any flexjobs identity holds.
resource "google_storage_bucket_iam_member" "upload_reader" {
  bucket = google_storage_bucket.uploads.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.function["handle_upload"].member
}

# Uploaders may create request files and do nothing else there: no read (another team's
# requests), no overwrite or delete (objectCreator lacks storage.objects.delete, which replacing
# an object needs). The only write to the request bucket this module grants.
resource "google_storage_bucket_iam_member" "request_uploaders" {
  for_each = toset(var.request_uploaders)

  bucket = google_storage_bucket.uploads.name
  role   = "roles/storage.objectCreator"
  member = each.value

  lifecycle {
    # A training container that may also upload could submit as anyone from inside a job.
    precondition {
      condition     = !contains([for email in var.training_service_accounts : "serviceAccount:${email}"], each.value)
      error_message = "${each.value} is one of training_service_accounts: a training service account must never write the request bucket (requests and checkpoints never share trust)."
    }
  }
}

resource "google_service_account_iam_member" "training_sa_user" {
  for_each = local.training_sa_users

  service_account_id = each.value.service_account_id
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.function[each.value.function].member
}

# --- Pub/Sub push invoker ---------------------------------------------------------------------

resource "google_service_account" "push_invoker" {
  account_id   = "flexjobs-push-invoker"
  display_name = "flexjobs Pub/Sub push invoker"
  description  = "Identity of the OIDC token Pub/Sub attaches when it pushes to the flexjobs functions."

  depends_on = [google_project_service.apis]
}

# A 2nd gen function is a Cloud Run service: invoking it takes roles/run.invoker on that
# service (roles/cloudfunctions.invoker covers 1st gen functions only).
resource "google_cloud_run_service_iam_member" "push_invoker" {
  for_each = local.pushed_functions

  location = var.region
  service  = local.function_services[each.value]
  role     = "roles/run.invoker"
  member   = google_service_account.push_invoker.member
}

# Pub/Sub mints the push tokens as the invoker. Projects whose Pub/Sub service agent predates
# 8 April 2021 need this grant; it is scoped to the invoker alone.
resource "google_service_account_iam_member" "pubsub_agent_token_creator" {
  service_account_id = google_service_account.push_invoker.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# --- Uploads through Eventarc (upload_delivery = "eventarc") ----------------------------------
# An Eventarc Pub/Sub trigger on the request bucket's notification topic (functions.tf). Its
# identity only invokes handle_upload: a Pub/Sub trigger needs no roles/eventarc.eventReceiver
# (Eventarc, "Roles and permissions": not when routing direct events from Cloud Pub/Sub), and
# the Cloud Storage service agent publishes to that one topic only (storage.tf), not to the
# project as an Eventarc storage trigger would need.

resource "google_service_account" "upload_trigger" {
  count = var.upload_delivery == "eventarc" ? 1 : 0

  account_id   = "flexjobs-upload-trigger"
  display_name = "flexjobs upload trigger"
  description  = "Identity of the Eventarc storage trigger that delivers upload events to handle_upload."

  depends_on = [google_project_service.apis]
}

resource "google_cloud_run_service_iam_member" "upload_trigger_invoker" {
  count = var.upload_delivery == "eventarc" ? 1 : 0

  location = var.region
  service  = local.function_services.handle_upload
  role     = "roles/run.invoker"
  member   = google_service_account.upload_trigger[0].member
}

resource "google_service_account_iam_member" "pubsub_agent_token_creator_upload" {
  count = var.upload_delivery == "eventarc" ? 1 : 0

  service_account_id = google_service_account.upload_trigger[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# --- Cloud Build identity for the function builds ---------------------------------------------

# Builds run as this account rather than a default one (since mid-2024 new projects build as
# the Compute Engine default account, which an organization may have left without roles).
resource "google_service_account" "build" {
  account_id   = "flexjobs-build"
  display_name = "flexjobs function builds"
  description  = "Cloud Build identity that turns the flexjobs source zip into function images."

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "build_log_writer" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = google_service_account.build.member
}

# The build reads the function source, and no other object: not a checkpoint, not a request.
# Cloud Functions (2nd gen, the v2 API) copies the source object from our source bucket into a
# bucket of its own, gcf-v2-sources-PROJECT_NUMBER-REGION, and Cloud Build fetches it from
# there (Cloud Run functions, "Build process overview"). The Cloud Run build service account
# page asks for Storage Object Admin; read (list and get) is all a build of this source needs.
resource "google_storage_bucket_iam_member" "build_source_reader" {
  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.build.member
}

# The staging bucket does not exist before the first deploy, so no bucket-level grant can name
# it: a project-level grant, with an IAM condition on that one bucket's resource name. Cloud
# Storage evaluates conditions on resource.name at project level ("Resource types that accept
# conditional role bindings": buckets, and objects through a higher-level policy), as
# projects/_/buckets/BUCKET for the bucket and projects/_/buckets/BUCKET/objects/OBJECT for an
# object ("Resource attributes for IAM Conditions"). Listing is checked on the bucket (the
# JSON and XML API permission tables: a bucket's object list needs storage.objects.list on the
# bucket) and reading on the object, so the condition names both; the exact match and the
# trailing "/" keep out any other bucket whose name merely begins the same.
resource "google_project_iam_member" "build_gcf_sources_reader" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = google_service_account.build.member

  condition {
    title       = "gcf-v2-sources-only"
    description = "Only Cloud Functions' source staging bucket of this project and region, and its objects."
    expression  = "resource.name == \"projects/_/buckets/${local.gcf_sources_bucket}\" || resource.name.startsWith(\"projects/_/buckets/${local.gcf_sources_bucket}/\")"
  }
}

resource "google_artifact_registry_repository_iam_member" "build_writer" {
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.build.member
}
