"""The host's users in the admin, so support accounts can be created and put in the
"Realtime support" group (messenger_realtime's migration 0004) without a shell."""

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import UserChangeForm, UserCreationForm
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import User
from .services import revocation


class MessengerUserCreationForm(UserCreationForm):  # type: ignore[type-arg]
    class Meta(UserCreationForm.Meta):  # type: ignore[name-defined,misc]
        model = User
        fields = ("username", "display_name")


class MessengerUserChangeForm(UserChangeForm):  # type: ignore[type-arg]
    class Meta(UserChangeForm.Meta):  # type: ignore[name-defined,misc]
        model = User


@admin.register(User)
class UserAdmin(DjangoUserAdmin):  # type: ignore[type-arg]
    form = MessengerUserChangeForm
    add_form = MessengerUserCreationForm
    list_display = ("username", "display_name", "is_staff", "is_active", "last_login")
    actions = ("log_out_everywhere",)
    search_fields = ("username", "display_name", "email")
    fieldsets = (
        *DjangoUserAdmin.fieldsets,  # type: ignore[misc]
        ("Messenger", {"fields": ("display_name",)}),
    )
    add_fieldsets = (
        (
            None,
            {
                "classes": ("wide",),
                "fields": ("username", "display_name", "password1", "password2"),
            },
        ),
    )

    @admin.action(description="Log out everywhere (refuse their tokens, close their connections)")
    def log_out_everywhere(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        users = list(queryset.values_list("id", flat=True))
        for user_id in users:
            revocation.log_out_everywhere(user_id)
        self.message_user(request, f"Logged out {len(users)} user(s) everywhere.")
