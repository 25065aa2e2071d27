/* Dropping every capability before exec, in the documented order:
 * bounding set -> ids (already final when this is called) -> capset
 * (effective/permitted/inheritable empty) -> ambient -> no_new_privs. */
#ifndef SKIFF_CAPS_H
#define SKIFF_CAPS_H

#include "error.h"

int skiff_caps_drop_all(skiff_err *err);

#endif
