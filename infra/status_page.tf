# The status page (functions/main.py status_page): the one HTTP function, read by people.
#
# Authenticated callers only. Cloud Run checks every request's Google identity token against
# roles/run.invoker on the function's service, and that role goes to var.status_page_invokers
# (a Google group) and to nobody else here: no allUsers, no allAuthenticatedUsers. Reach it
# from a browser through `gcloud run services proxy` (docs/status-page.md), or put a
# load balancer with IAP in front and set status_page_ingress = "ALLOW_INTERNAL_AND_GCLB".
#
# It only reads: its own service account holds roles/datastore.viewer and nothing else (no
# Vertex AI, no Pub/Sub, no Cloud Storage).

resource "google_service_account" "status_page" {
  account_id   = "flexjobs-status-page"
  display_name = "flexjobs status_page"
  description  = "Runs the status_page function of flexjobs: reads Firestore, nothing else."

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "status_page_reader" {
  project = var.project_id
  role    = "roles/datastore.viewer"
  member  = google_service_account.status_page.member
}

resource "google_cloudfunctions2_function" "status_page" {
  #checkov:skip=CKV_GCP_124:A page for people: Cloud Run IAM is the gate (roles/run.invoker to one group, never allUsers or allAuthenticatedUsers), and ALLOW_ALL is the ingress `gcloud run services proxy` reaches with the caller's identity; var.status_page_ingress = "ALLOW_INTERNAL_AND_GCLB" puts it behind a load balancer with IAP instead.
  name        = "flexjobs-status-page"
  location    = var.region
  description = "flexjobs: the read-only status page (authenticated callers only)."

  build_config {
    runtime           = "python311"
    entry_point       = "status_page"
    service_account   = google_service_account.build.id
    docker_repository = google_artifact_registry_repository.functions.id
    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    # A page reads a bounded number of records; a minute is far more than it needs.
    timeout_seconds  = 60
    available_memory = local.memory.status_page
    # Pages are read by people a few at a time: one instance serves them concurrently.
    available_cpu                    = "1"
    max_instance_count               = local.max_instances.status_page
    max_instance_request_concurrency = 20
    ingress_settings                 = var.status_page_ingress
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.status_page.email
    # functions-framework serves cpu_count x 4 requests at once unless THREADS says more.
    environment_variables = merge(local.function_env, { THREADS = "20" })
  }

  depends_on = [time_sleep.iam_propagation, google_project_iam_member.status_page_reader]
}

# The only grant of the invoker role on the status page: the group named by the variable.
# Without it, only principals that already hold run.routes.invoke in the project (Owners,
# Editors) can open the page.
resource "google_cloud_run_service_iam_member" "status_page_invokers" {
  count = var.status_page_invokers == null ? 0 : 1

  location = var.region
  service  = google_cloudfunctions2_function.status_page.service_config[0].service
  role     = "roles/run.invoker"
  member   = "group:${var.status_page_invokers}"
}
