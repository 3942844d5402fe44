# Inputs. Only project_id and function_source are required; every other default matches the
# contract in docs/contract.md ("Environment").

variable "project_id" {
  description = "Project that runs flexjobs: its functions, topics, Firestore database and the Vertex AI jobs."
  type        = string

  validation {
    condition     = can(regex("^[a-z][-a-z0-9]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a Google Cloud project ID (6 to 30 lower-case letters, digits or hyphens)."
  }
}

variable "region" {
  description = "Region of the functions, the buckets, the Eventarc trigger and the Scheduler job."
  type        = string
  default     = "us-central1"

  validation {
    # The same shape the code demands of FLEXJOBS_LOCATION (docs/contract.md, "Locations").
    condition     = can(regex("^[a-z]+(-[a-z]+)*[0-9]+$", var.region))
    error_message = "region must be a region name such as us-central1 or europe-west4."
  }
}

variable "vertex_location" {
  description = "FLEXJOBS_LOCATION: the Vertex AI region of requests that name none. null means var.region."
  type        = string
  default     = null

  validation {
    condition     = var.vertex_location == null || can(regex("^[a-z]+(-[a-z]+)*[0-9]+$", coalesce(var.vertex_location, "x1")))
    error_message = "vertex_location must be a region name such as us-central1."
  }
}

variable "firestore_location" {
  description = "Location of the Firestore (default) database: a region (us-central1) or a multi-region (nam5). null means var.region. Cannot change once created."
  type        = string
  default     = null
}

variable "firestore_point_in_time_recovery" {
  description = "Keep 7 days of Firestore versions (billed as storage of the old versions; small for flexjobs' records)."
  type        = bool
  default     = true
}

variable "function_source" {
  description = "Path of the zip './dev package' built, e.g. ../dist/flexjobs-functions-0123456789abcdef.zip. Its file name (content hash) is the object name, so only changed code redeploys."
  type        = string

  validation {
    condition     = can(regex("^flexjobs-functions-[0-9a-f]{16}\\.zip$", basename(var.function_source)))
    error_message = "function_source must be a zip built by './dev package' (flexjobs-functions-<16 hex digits>.zip)."
  }
}

# --- Topics of the contract ------------------------------------------------------------------

variable "requests_topic" {
  description = "FLEXJOBS_REQUESTS_TOPIC: job requests (pushed to handle_job_request)."
  type        = string
  default     = "job-requests"
}

variable "events_topic" {
  description = "FLEXJOBS_EVENTS_TOPIC: state hints from the log sink (pushed to handle_job_event)."
  type        = string
  default     = "job-events"
}

variable "notifications_topic" {
  description = "FLEXJOBS_NOTIFICATIONS_TOPIC: notifications flexjobs publishes; subscribe to it yourself."
  type        = string
  default     = "job-notifications"
}

variable "scheduler_ticks_topic" {
  description = "Scheduler ticks (pushed to handle_scheduler_tick)."
  type        = string
  default     = "scheduler-ticks"
}

# --- Uploads ----------------------------------------------------------------------------------

variable "upload_bucket_name" {
  description = "Name of the request bucket this module creates (FLEXJOBS_REQUEST_BUCKET): request files only, never checkpoints. null means '<project_id>-flexjobs-uploads'. To use an existing bucket, import it (see README.md)."
  type        = string
  default     = null
}

variable "upload_delivery" {
  description = "How handle_upload gets the request bucket's notifications (always published to upload_notifications_topic): 'eventarc' (an Eventarc Pub/Sub trigger on that topic; its Eventarc-managed subscription has no dead-letter topic) or 'notification' (a push subscription of our own with a dead-letter topic)."
  type        = string
  default     = "eventarc"

  validation {
    condition     = contains(["eventarc", "notification"], var.upload_delivery)
    error_message = "upload_delivery must be 'eventarc' or 'notification'."
  }
}

variable "upload_notifications_topic" {
  description = "Topic of the request bucket's Pub/Sub notifications (OBJECT_FINALIZE under upload_prefix), in both upload_delivery modes."
  type        = string
  default     = "upload-notifications"
}

variable "upload_prefix" {
  description = "FLEXJOBS_UPLOAD_PREFIX: objects under this folder of the request bucket are request files."
  type        = string
  default     = "requests/"

  validation {
    # The code reads an empty prefix as the default one, so say so here rather than differ.
    condition     = length(var.upload_prefix) > 0
    error_message = "upload_prefix must not be empty (the functions would read it as requests/)."
  }
}

variable "max_upload_bytes" {
  description = "FLEXJOBS_MAX_UPLOAD_BYTES: a larger request file is refused unread."
  type        = number
  default     = 8388608

  validation {
    condition     = var.max_upload_bytes >= 1 && floor(var.max_upload_bytes) == var.max_upload_bytes
    error_message = "max_upload_bytes must be a positive integer."
  }
}

variable "request_uploaders" {
  description = "Principals that may upload request files: roles/storage.objectCreator on the request bucket and nothing else (no read, no overwrite, no delete), e.g. [\"group:ml-team@example.com\"]. Never a training service account (a precondition checks): whoever writes checkpoints must not submit requests."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for member in var.request_uploaders :
      can(regex("^(user|group|serviceAccount|domain|principal|principalSet):[^,\\s]+$", member))
    ])
    error_message = "request_uploaders must be IAM principals such as group:ml-team@example.com or serviceAccount:ci@my-project.iam.gserviceaccount.com (never allUsers or allAuthenticatedUsers)."
  }
}

variable "upload_retention_days" {
  description = "Delete request files under upload_prefix this many days after upload (they are read once). 0 keeps them; nothing outside the prefix is ever deleted by this rule."
  type        = number
  default     = 30

  validation {
    condition     = var.upload_retention_days >= 0 && floor(var.upload_retention_days) == var.upload_retention_days
    error_message = "upload_retention_days must be a whole number of days, 0 or more."
  }
}

# --- What the functions may touch -------------------------------------------------------------

variable "checkpoint_buckets" {
  description = "Every bucket jobs write checkpoints or outputs to (checkpointUri, baseOutputDirectory); never the request bucket (a precondition checks). handle_job_event and handle_scheduler_tick get object read on each, nothing else. A retry in a bucket not listed fails with 403: it never restarts from scratch instead."
  type        = list(string)
  default     = []

  validation {
    # Bare bucket names, as the IAM and notification resources take them.
    condition     = alltrue([for bucket in var.checkpoint_buckets : can(regex("^[a-z0-9][-a-z0-9_.]{1,220}[a-z0-9]$", bucket))])
    error_message = "checkpoint_buckets must be bucket names such as my-project-checkpoints (no gs://, no path)."
  }
}

variable "checkpoint_notification_buckets" {
  description = "Checkpoint buckets whose new objects reach handle_upload as live progress (latestCheckpoint and progress between retries), through a Cloud Storage Pub/Sub notification each (OBJECT_FINALIZE, JSON_API_V1) to checkpoint_events_topic. null means every bucket of checkpoint_buckets; [] turns live progress off (retries still list the checkpoints). Each must be one of checkpoint_buckets. Applying needs storage.buckets.update on each bucket and resourcemanager.projects.get on its project."
  type        = list(string)
  default     = null
}

variable "checkpoint_events_topic" {
  description = "Topic the checkpoint buckets' notifications publish to (pushed to handle_upload, with a dead-letter topic)."
  type        = string
  default     = "checkpoint-events"
}

variable "training_service_accounts" {
  description = "Service accounts a request may name (FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS). Each function that creates jobs gets roles/iam.serviceAccountUser on each, and on nothing else. Empty: jobs run as the Vertex AI default identity and a request may name none."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for email in var.training_service_accounts : can(regex("^[^@,\\s]+@[^@,\\s]+$", email))])
    error_message = "training_service_accounts must be service account emails."
  }
}

variable "allowed_image_prefixes" {
  description = "FLEXJOBS_ALLOWED_IMAGE_PREFIXES: container image prefixes a request may use, e.g. [\"us-central1-docker.pkg.dev/my-project/train/\"]. Empty allows any image (the code's default)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for prefix in var.allowed_image_prefixes : !strcontains(prefix, ",")])
    error_message = "An image prefix cannot contain a comma (the list is passed comma-separated)."
  }
}

variable "allowed_regions" {
  description = "FLEXJOBS_ALLOWED_REGIONS: the Vertex AI regions a request may run in (its location, AUTO's regions, fallback rungs), e.g. [\"us-central1\", \"us-east1\"]. vertex_location is always one. Empty allows any region name (the code's default)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for region in var.allowed_regions : can(regex("^[a-z]+(-[a-z]+)+[0-9]+$", region))])
    error_message = "allowed_regions must be Vertex AI region names such as us-central1."
  }
}

# --- Runtime settings (the env map every function gets) ---------------------------------------

variable "claim_ttl_seconds" {
  description = "FLEXJOBS_CLAIM_TTL_SECONDS: how long a submission claim is honoured. Must be >= the longest function timeout (540 s), and shorter than the shortest time a request's deliveries can take (see request_minimum_backoff_seconds)."
  type        = number
  default     = 600
}

variable "egress_usd_per_gb" {
  description = "FLEXJOBS_EGRESS_USD_PER_GB: USD per GB of reading a checkpoint from another region, what AUTO's region rule charges a move (README, \"The region rule\"). 0.02 within a continent; set it to your buckets' inter-region rate."
  type        = number
  default     = 0.02

  validation {
    condition     = var.egress_usd_per_gb >= 0 && var.egress_usd_per_gb <= 10
    error_message = "egress_usd_per_gb must be between 0 and 10 (USD per GB)."
  }
}

variable "call_timeout_seconds" {
  description = "FLEXJOBS_CALL_TIMEOUT_SECONDS: deadline of each Vertex, Firestore and Pub/Sub call."
  type        = number
  default     = 30

  validation {
    condition     = var.call_timeout_seconds > 0 && var.call_timeout_seconds <= 120
    error_message = "call_timeout_seconds must be between 1 and 120."
  }
}

variable "hint_coalesce_seconds" {
  description = "FLEXJOBS_HINT_COALESCE_SECONDS: at most one Vertex read per job per this interval. Keep it well under handle_job_event's timeout (300 s)."
  type        = number
  default     = 10

  validation {
    condition     = var.hint_coalesce_seconds > 0 && var.hint_coalesce_seconds <= 60
    error_message = "hint_coalesce_seconds must be between 1 and 60 (the waiting delivery holds a request slot that long)."
  }
}

# --- The status page ------------------------------------------------------------------------

variable "status_page_invokers" {
  description = "Email of the Google group whose members may open the status page (roles/run.invoker on its service), e.g. ml-platform@example.com. null grants it to nobody: only principals already holding run.routes.invoke in the project (Owners, Editors) can open it. Never public."
  type        = string
  default     = null

  validation {
    # A bare group email: not "group:...", not allUsers or allAuthenticatedUsers.
    condition     = var.status_page_invokers == null || can(regex("^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,}$", coalesce(var.status_page_invokers, "x")))
    error_message = "status_page_invokers must be a Google group's email address, such as ml-platform@example.com (without \"group:\")."
  }
}

variable "status_page_ingress" {
  description = "Ingress of the status page: ALLOW_ALL (reached with an identity token, e.g. through `gcloud run services proxy`; IAM still admits only the invokers), ALLOW_INTERNAL_AND_GCLB (behind a load balancer, e.g. with IAP) or ALLOW_INTERNAL_ONLY (from the VPC)."
  type        = string
  default     = "ALLOW_ALL"

  validation {
    condition     = contains(["ALLOW_ALL", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_INTERNAL_ONLY"], var.status_page_ingress)
    error_message = "status_page_ingress must be ALLOW_ALL, ALLOW_INTERNAL_AND_GCLB or ALLOW_INTERNAL_ONLY."
  }
}

# --- Scaling and delivery ---------------------------------------------------------------------

variable "max_instances" {
  description = "max_instance_count per entry point, merged over the defaults (handle_job_request 20, handle_job_event 10, handle_scheduler_tick 1, handle_upload 10, status_page 3)."
  type        = map(number)
  default     = {}
}

variable "memory" {
  description = "available_memory per entry point, merged over the defaults (512Mi each; 1Gi for handle_job_event, which serves 20 requests at once)."
  type        = map(string)
  default     = {}
}

variable "max_delivery_attempts" {
  description = "Deliveries of one message before Pub/Sub moves it to the dead-letter topic (5 to 100). With request_minimum_backoff_seconds it must outlast claim_ttl_seconds (a precondition checks)."
  type        = number
  default     = 10

  validation {
    condition     = var.max_delivery_attempts >= 5 && var.max_delivery_attempts <= 100
    error_message = "max_delivery_attempts must be between 5 and 100."
  }
}

variable "request_minimum_backoff_seconds" {
  description = "retry_policy.minimum_backoff (seconds) of the push paths that carry requests (job-requests, and request-file uploads in notification mode). A crash between a create and its record leaves a live claim, and every redelivery inside claim_ttl_seconds fails on it: (max_delivery_attempts - 1) x this must exceed claim_ttl_seconds, so a live claim never uses up a request's deliveries (a precondition checks; see README.md, Dead letters)."
  type        = number
  default     = 75

  validation {
    condition     = var.request_minimum_backoff_seconds >= 0 && var.request_minimum_backoff_seconds <= 600 && floor(var.request_minimum_backoff_seconds) == var.request_minimum_backoff_seconds
    error_message = "request_minimum_backoff_seconds must be a whole number of seconds from 0 to 600 (Pub/Sub's range)."
  }
}

variable "tick_schedule" {
  description = "Cron schedule of the scheduler tick (UTC)."
  type        = string
  default     = "* * * * *"
}

variable "labels" {
  description = "Labels added to every resource that takes labels (besides app = flexjobs)."
  type        = map(string)
  default     = {}
}

# --- Monitoring (monitoring.tf) --------------------------------------------------------------

variable "alert_notification_channels" {
  description = "Notification channels every alert policy notifies: ids such as projects/PROJECT/notificationChannels/123 (create them once in the console or with gcloud). Empty: the alerts are still created and open incidents in the console, but notify nobody."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.alert_notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "alert_notification_channels must be channel ids: projects/PROJECT/notificationChannels/ID."
  }
}

variable "push_backlog_age_seconds" {
  description = "Alert when a push subscription's oldest unacknowledged message is older than this (seconds) for 5 minutes. A request waits out a live claim (claim_ttl_seconds) and its backoff before it is taken, so keep it above both."
  type        = number
  default     = 1800

  validation {
    condition     = var.push_backlog_age_seconds >= 60
    error_message = "push_backlog_age_seconds must be at least 60."
  }
}

variable "error_ratio_threshold" {
  description = "Alert when a function answers 5xx to more than this share of its requests (0 to 1) for 15 minutes. Transient faults answer 5xx on purpose (Pub/Sub redelivers), so leave room for them."
  type        = number
  default     = 0.1

  validation {
    condition     = var.error_ratio_threshold > 0 && var.error_ratio_threshold < 1
    error_message = "error_ratio_threshold must be between 0 and 1."
  }
}

variable "gpu_daily_budget_usd" {
  description = "Alert when the estimated cost (the price table's list prices) of the attempts that ended in the last 24 hours exceeds this many USD. null: no budget alert."
  type        = number
  default     = null

  validation {
    condition     = var.gpu_daily_budget_usd == null || coalesce(var.gpu_daily_budget_usd, 1) > 0
    error_message = "gpu_daily_budget_usd must be a positive number of USD, or null."
  }
}

variable "serving_grace_seconds" {
  description = "FLEXJOBS_SERVING_GRACE_SECONDS: how long a Spot deployment may serve fewer replicas than required before an on-demand fallback is deployed (long enough for Compute Engine's own restarts of a reclaimed node)."
  type        = number
  default     = 300

  validation {
    condition     = var.serving_grace_seconds >= 0 && var.serving_grace_seconds <= 604800
    error_message = "serving_grace_seconds must be 0 to 604800 seconds."
  }
}

variable "serving_hold_seconds" {
  description = "FLEXJOBS_SERVING_HOLD_SECONDS: how long Spot must serve all its required replicas again before traffic goes back and the fallback is undeployed (hysteresis against a flapping zone)."
  type        = number
  default     = 1800

  validation {
    condition     = var.serving_hold_seconds >= 0 && var.serving_hold_seconds <= 604800
    error_message = "serving_hold_seconds must be 0 to 604800 seconds."
  }
}

variable "admission_queues" {
  description = "FLEXJOBS_QUEUES: the admission queue file's YAML text (docs/admission.md), e.g. file(\"queues.yaml\"). Empty turns admission off: every request is submitted as it arrives."
  type        = string
  default     = ""

  validation {
    # Cloud Run caps one environment variable at 32 KiB; the code reads at most 256 KiB.
    condition     = length(var.admission_queues) <= 32768
    error_message = "admission_queues must be at most 32768 characters (a Cloud Run environment variable's limit)."
  }
}
